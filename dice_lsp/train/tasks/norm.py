"""Normalisation tasks over the last dim: layer norm and RMS norm, without or with affine weights (created in the
same order and shapes as the reference's, so both models hold the same values after the same seed).

Templates: one warp per row (two sweeps, shuffle reductions) and one block per row (one sweep of sum and sum of
squares, reduced through shared memory).
"""

from __future__ import annotations

import random

from dice_lsp.train.tasks.catalog import RenderedTask, shape_names, sizes, template
from dice_lsp.train.tasks.problem import problem
from dice_lsp.train.tasks.style import sample_style, solution_file

_WARP = """${includes}

// ${what} over the last dim: one warp per row
__global__ void ${kernel}(const float*${ptr} x, ${params}float*${ptr} y, int rows, int cols, float eps) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float* in = x + (${idx})row * cols;
    float* out = y + (${idx})row * cols;
${warp_stats}
    for (int c = lane; c < cols; c += 32) {
        float v = in[c];
        out[c] = ${output};
    }
}

torch::Tensor ${host}(${signature}) {
${inputs}
    int cols = (int)x.size(-1);
    int rows = (int)(x.numel() / cols);
    auto y = torch::empty_like(x);
    const int threads = ${block};
    const int warps = threads / 32;
${stream}
    ${kernel}<<<(rows + warps - 1) / warps, threads, 0, stream>>>(x.data_ptr<float>(), ${pointers}y.data_ptr<float>(),
                                                                  rows, cols, (float)eps);
${checked}
    return y;
}
"""

_WARP_LAYER = """    float sum = 0.0f;
    for (int c = lane; c < cols; c += 32) sum += in[c];
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffff, sum, offset);
    float mean = sum / cols;
    // second sweep: variance around the mean (steadier than E[x^2] - mean^2)
    float sq = 0.0f;
    for (int c = lane; c < cols; c += 32) {
        float diff = in[c] - mean;
        sq += diff * diff;
    }
    for (int offset = 16; offset > 0; offset >>= 1) sq += __shfl_xor_sync(0xffffffff, sq, offset);
    float rstd = rsqrtf(sq / cols + eps);"""

_WARP_RMS = """    float sq = 0.0f;
    for (int c = lane; c < cols; c += 32) sq += in[c] * in[c];
    for (int offset = 16; offset > 0; offset >>= 1) sq += __shfl_xor_sync(0xffffffff, sq, offset);
    float rstd = rsqrtf(sq / cols + eps);"""

_BLOCK = """${includes}

#define ${threads_name} ${block}

// ${what} over the last dim: one block per row, one sweep for the statistics
__global__ void ${kernel}(const float*${ptr} x, ${params}float*${ptr} y, int cols, float eps) {
    __shared__ float sums[${threads_name}];
    __shared__ float squares[${threads_name}];
    const float* in = x + (${idx})blockIdx.x * cols;
    float* out = y + (${idx})blockIdx.x * cols;
    float sum = 0.0f, sq = 0.0f;
    for (int c = threadIdx.x; c < cols; c += ${threads_name}) {
        float v = in[c];
        sum += v;
        sq += v * v;
    }
    sums[threadIdx.x] = sum;
    squares[threadIdx.x] = sq;
    __syncthreads();
    for (int span = ${threads_name} / 2; span > 0; span >>= 1) {
        if (threadIdx.x < span) {
            sums[threadIdx.x] += sums[threadIdx.x + span];
            squares[threadIdx.x] += squares[threadIdx.x + span];
        }
        __syncthreads();
    }
${block_stats}
    for (int c = threadIdx.x; c < cols; c += ${threads_name}) {
        float v = in[c];
        out[c] = ${output};
    }
}

torch::Tensor ${host}(${signature}) {
${inputs}
    int cols = (int)x.size(-1);
    int rows = (int)(x.numel() / cols);
    auto y = torch::empty_like(x);
${stream}
    ${kernel}<<<rows, ${threads_name}, 0, stream>>>(x.data_ptr<float>(), ${pointers}y.data_ptr<float>(), cols,
                                                    (float)eps);
${checked}
    return y;
}
"""

_BLOCK_LAYER = """    float mean = sums[0] / cols;
    float var = fmaxf(squares[0] / cols - mean * mean, 0.0f);
    float rstd = rsqrtf(var + eps);"""

_BLOCK_RMS = """    float rstd = rsqrtf(squares[0] / cols + eps);"""

_TEMPLATES = {"warp_row": _WARP, "block_row": _BLOCK}


def _reference_parts(rng: random.Random, kind: str, affine: str, eps: float) -> tuple[str, str, bool, str]:
    """(init lines, forward body, functional?, ModelNew's init lines): a Module layer or explicit parameters."""
    explicit = rng.random() < 0.5
    weight = affine != "none"
    bias = affine == "weight_bias"
    if not explicit:
        if kind == "layer":
            extra = "" if not weight else (", bias=False" if not bias else "")
            init = f"self.norm = nn.LayerNorm(normalized_shape, eps={eps}, elementwise_affine={weight}{extra})"
        else:
            init = f"self.norm = nn.RMSNorm(normalized_shape, eps={eps}, elementwise_affine={weight})"
        mine = ["self.weight = nn.Parameter(torch.ones(normalized_shape))"] if weight else []
        mine += ["self.bias = nn.Parameter(torch.zeros(normalized_shape))"] if bias else []
        return init, "return self.norm(x)", False, "\n".join(mine)
    lines = ["self.eps = eps_value".replace("eps_value", str(eps))]
    if weight:
        lines.append("self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(normalized_shape))")
    if bias:
        lines.append("self.bias = nn.Parameter(0.1 * torch.randn(normalized_shape))")
    tail = (" * self.weight" if weight else "") + (" + self.bias" if bias else "")
    if kind == "layer":
        body = ("mean = x.mean(dim=-1, keepdim=True)\nvar = x.var(dim=-1, keepdim=True, unbiased=False)\n"
                f"return (x - mean) / torch.sqrt(var + self.eps){tail}")
    else:
        body = f"return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps){tail}"
    mine = [line for line in lines if not line.startswith("self.eps")]
    return "\n".join(lines), body, False, "\n".join(mine)


def _norm_task(rng: random.Random, name: str) -> RenderedTask:
    kind = rng.choice(("layer", "rms"))
    affine = rng.choice(("none", "weight", "weight_bias") if kind == "layer" else ("none", "weight"))
    eps = rng.choice((1e-5, 1e-6))
    rank = rng.choice((2, 3))
    shape = sizes(rng, rank, (1 << 14, 1 << 22))
    names = shape_names(shape)
    stem = f"{kind}_norm"
    style = sample_style(rng, stem, (128, 256, 512))
    init, forward, functional, mine = _reference_parts(rng, kind, affine, eps)
    reference = problem(
        init_params="normalized_shape: int", init_body=init, forward_params="x", forward_body=forward,
        constants="\n".join(f"{n} = {v}" for n, v in zip(names, shape)),
        inputs=f"torch.randn({', '.join(names)})", init_inputs=names[-1], functional=functional,
        what=f"{'layer' if kind == 'layer' else 'RMS'} normalization over the last dimension")
    tensors = ["x"] + (["weight"] if affine != "none" else []) + (["bias"] if affine == "weight_bias" else [])
    params = "".join(f"const float*{style.ptr} {t}, " for t in tensors[1:])
    pointers = "".join(f"{t}.data_ptr<float>(), " for t in tensors[1:])
    output = ("(v - mean) * rstd" if kind == "layer" else "v * rstd") + (" * weight[c]" if "weight" in tensors else "")
    output += " + bias[c]" if "bias" in tensors else ""
    stats = {("warp_row", "layer"): _WARP_LAYER, ("warp_row", "rms"): _WARP_RMS,
             ("block_row", "layer"): _BLOCK_LAYER, ("block_row", "rms"): _BLOCK_RMS}[(name, kind)]
    signature = ", ".join(f"torch::Tensor {t}" for t in tensors) + ", double eps"
    cuda = style.fill(_TEMPLATES[name], includes=style.includes(), kernel=style.kernel(), what=stem.replace("_", " "),
                      params=params, pointers=pointers, output=output, warp_stats=stats, block_stats=stats,
                      signature=signature, inputs=style.inputs(*tensors),
                      threads_name="THREADS" if style.naming % 2 else "NUM_THREADS")
    call = [style.arg("x")] + [f"self.{t}" for t in tensors[1:]] + [str(eps)]
    solution = solution_file(style, cuda=cuda, declaration=f"torch::Tensor {style.host}({signature});",
                             init_params="normalized_shape: int", init_body=mine, forward_params="x",
                             call_args=", ".join(call))
    return RenderedTask(reference, solution, f"{stem}-{affine}-rank{rank}-{'small' if shape[-1] < 1024 else 'wide'}")


for _name in _TEMPLATES:
    template("norm", _name)(lambda rng, name=_name: _norm_task(rng, name))
