"""Tasks that divide by a norm: each row by its L1 or L2 norm, and the whole tensor by its Frobenius norm.

Templates: one block per row (the row's sum of |x| or x^2 reduced in the block, then the division), and two kernels
for the Frobenius norm (every block adds its sum of squares into one scalar, then every element is divided).
"""

from __future__ import annotations

import random

from dice_lsp.train.tasks.catalog import RenderedTask, sizes, template
from dice_lsp.train.tasks.channel_norm import GROUP_NORM
from dice_lsp.train.tasks.problem import problem
from dice_lsp.train.tasks.style import sample_style, solution_file

_BLOCK_SUM = GROUP_NORM[GROUP_NORM.index("// the block's sum"):GROUP_NORM.index("// ${what}")].replace(
    "${block_sum}", "block_sum")

_ROWS = """${includes}

${block_sum_fn}// ${what}: one block per row; the row's norm, then every element divided by it
__global__ void ${kernel}(const float*${ptr} x, float*${ptr} y, int64_t cols) {
    __shared__ float scratch[32];
    const float* in = x + (int64_t)blockIdx.x * cols;
    float* out = y + (int64_t)blockIdx.x * cols;
    float acc = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) acc += ${term};
    const float norm = ${finish};
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) out[j] = in[j] / norm;
}

torch::Tensor ${host}(torch::Tensor x) {
${inputs}
    TORCH_CHECK(x.dim() == 2, "expected a 2D input");
    auto y = torch::empty_like(x);
${stream}
    ${kernel}<<<(unsigned)x.size(0), ${block}, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.size(1));
${checked}
    return y;
}
"""

_FROBENIUS = """${includes}

${block_sum_fn}// pass 1: every block adds its elements' squares into one scalar
__global__ void ${sum_kernel}(const float*${ptr} x, float*${ptr} total, int64_t n) {
    __shared__ float scratch[32];
    float acc = 0.0f;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        acc += x[i] * x[i];
    }
    acc = ${block_sum}(acc, scratch);
    if (threadIdx.x == 0) atomicAdd(total, acc);
}

// pass 2: every element divided by the square root of the total
__global__ void ${kernel}(const float*${ptr} x, const float*${ptr} total, float*${ptr} y, int64_t n) {
    const float norm = sqrtf(*total);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        y[i] = x[i] / norm;
    }
}

torch::Tensor ${host}(torch::Tensor x) {
${inputs}
    auto y = torch::empty_like(x);
    auto total = torch::zeros({1}, x.options());
    const int64_t n = x.numel();
    const int threads = ${block};
    const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 1024);
${stream}
    ${sum_kernel}<<<blocks, threads, 0, stream>>>(x.data_ptr<float>(), total.data_ptr<float>(), n);
${checked}
    ${kernel}<<<(int)std::min<int64_t>((n + threads - 1) / threads, 65535), threads, 0, stream>>>(
        x.data_ptr<float>(), total.data_ptr<float>(), y.data_ptr<float>(), n);
${checked_again}
    return y;
}
"""


def _rows_task(rng: random.Random) -> RenderedTask:
    p = rng.choice((1, 2))
    shape = sizes(rng, 2, (1 << 14, 1 << 22))
    if p == 1:
        body = rng.choice(("return x / torch.sum(torch.abs(x), dim=1, keepdim=True)",
                           "return x / x.abs().sum(dim=1, keepdim=True)"))
    else:
        body = rng.choice(("return x / torch.norm(x, p=2, dim=1, keepdim=True)",
                           "return x / x.norm(dim=1, keepdim=True)", "return F.normalize(x, p=2.0, dim=1, eps=0.0)"))
    reference = problem(init_params="", init_body="", forward_params="x", forward_body=body,
                        constants=f"batch_size = {shape[0]}\ndim = {shape[1]}",
                        inputs="torch.randn(batch_size, dim)", init_inputs="", functional="F." in body,
                        what=f"division of each row by its L{p} norm")
    style = sample_style(rng, f"l{p}_norm", (128, 256, 512))
    cuda = style.fill(_ROWS, includes=style.includes(), kernel=style.kernel(), inputs=style.inputs("x"),
                      what=f"L{p} normalisation of rows", block_sum_fn=_BLOCK_SUM,
                      term="fabsf(in[j])" if p == 1 else "in[j] * in[j]",
                      finish="block_sum(acc, scratch)" if p == 1 else "sqrtf(block_sum(acc, scratch))")
    solution = solution_file(style, cuda=cuda, declaration=f"torch::Tensor {style.host}(torch::Tensor x);",
                             init_params="", init_body="", forward_params="x", call_args=style.arg("x"))
    return RenderedTask(reference, solution, f"l{p}-{'wide' if shape[1] >= 1024 else 'narrow'}")


def _frobenius_task(rng: random.Random) -> RenderedTask:
    rank = rng.choice((2, 3, 4))
    shape = sizes(rng, rank, (1 << 14, 1 << 22))
    names = ["batch_size", "dim"] if rank == 2 else ["batch_size", "channels", "dim"] if rank == 3 else \
        ["batch_size", "channels", "height", "width"]
    body = rng.choice(("norm = torch.norm(x, p=\"fro\")\nreturn x / norm", "return x / torch.linalg.norm(x)",
                       "return x / x.pow(2).sum().sqrt()"))
    reference = problem(init_params="", init_body="", forward_params="x", forward_body=body,
                        constants="\n".join(f"{n} = {v}" for n, v in zip(names, shape)),
                        inputs=f"torch.randn({', '.join(names)})", init_inputs="",
                        what="division of a tensor by its Frobenius norm")
    style = sample_style(rng, "frobenius_norm")
    cuda = style.fill(_FROBENIUS, includes=style.includes(), kernel=style.kernel(), sum_kernel=style.kernel("sum"),
                      inputs=style.inputs("x"), block_sum_fn=_BLOCK_SUM, block_sum="block_sum",
                      checked_again=style.checked().replace("cudaError_t err", "err")
                      if style.launch_check == "cuda" else style.checked())
    solution = solution_file(style, cuda=cuda, declaration=f"torch::Tensor {style.host}(torch::Tensor x);",
                             init_params="", init_body="", forward_params="x", call_args=style.arg("x"))
    return RenderedTask(reference, solution, f"frobenius-rank{rank}")


template("norm", "row_vector")(_rows_task)
template("norm", "frobenius")(_frobenius_task)
