"""Loss tasks that reduce to one number: MSE, Huber / smooth L1, hinge and KL divergence (a term per element), and
cross-entropy and triplet margin (a term per row).

Templates: a grid-stride sum of per-element terms, and one warp per row; both reduce in the block and add the
block's share into the scalar with one atomicAdd, already divided by the count the mean divides by.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from dice_lsp.train.tasks.catalog import RenderedTask, template
from dice_lsp.train.tasks.problem import problem
from dice_lsp.train.tasks.style import sample_style, solution_file


@dataclass(frozen=True)
class Loss:
    stem: str
    init: str  # the reference's init lines ("" for a functional loss)
    body: str  # the reference's forward body
    inputs: str  # get_inputs, of batch_size and dim
    term: str  # CUDA: the element's term from floats p, t (elementwise); the row's from row pointers (rows)
    divisor: str  # C++: what the sum is divided by (n: elements, rows)
    names: str  # forward's parameters
    what: str


def elementwise_losses(rng: random.Random) -> list[Loss]:
    beta = rng.choice((1.0, 0.5, 2.0))
    both = "torch.randn(batch_size, dim), torch.randn(batch_size, dim)"
    return [
        Loss("mse", *rng.choice((("", "return torch.mean((predictions - targets) ** 2)"),
                                 ("self.loss = nn.MSELoss()", "return self.loss(predictions, targets)"),
                                 ("", "return F.mse_loss(predictions, targets)"))),
             both, "(p - t) * (p - t)", "n", "predictions, targets", "the mean squared error"),
        Loss("huber", *rng.choice((("", f"return F.huber_loss(predictions, targets, delta={beta})"),
                                   (f"self.loss = nn.HuberLoss(delta={beta})",
                                    "return self.loss(predictions, targets)"))),
             both, f"fabsf(p - t) < {beta}f ? 0.5f * (p - t) * (p - t) : {beta}f * (fabsf(p - t) - 0.5f * {beta}f)",
             "n", "predictions, targets", "the Huber loss"),
        Loss("smooth_l1", "", f"return F.smooth_l1_loss(predictions, targets, beta={beta})", both,
             f"fabsf(p - t) < {beta}f ? 0.5f * (p - t) * (p - t) / {beta}f : fabsf(p - t) - 0.5f * {beta}f",
             "n", "predictions, targets", "the smooth L1 loss"),
        Loss("hinge", "", "return torch.mean(torch.clamp(1 - predictions * targets, min=0))",
             "torch.randn(batch_size, dim), torch.randint(0, 2, (batch_size, dim)).float() * 2 - 1",
             "fmaxf(1.0f - p * t, 0.0f)", "n", "predictions, targets", "the hinge loss"),
        Loss("kl_div", "", rng.choice(("return F.kl_div(torch.log(predictions), targets, reduction=\"batchmean\")",
                                       "return F.kl_div(predictions.log(), targets, reduction=\"batchmean\")")),
             "torch.randn(batch_size, dim).softmax(dim=-1), torch.randn(batch_size, dim).softmax(dim=-1)",
             "t > 0.0f ? t * (logf(t) - logf(p)) : 0.0f", "rows", "predictions, targets",
             "the KL divergence between two distributions per row"),
    ]


def row_losses(rng: random.Random) -> list[Loss]:
    margin = rng.choice((1.0, 0.5, 2.0))
    triplet = rng.choice(((f"self.loss = nn.TripletMarginLoss(margin={margin})",
                           "return self.loss(anchor, positive, negative)"),
                          ("", f"return F.triplet_margin_loss(anchor, positive, negative, margin={margin})")))
    return [
        Loss("cross_entropy", *rng.choice((("", "return F.cross_entropy(predictions, targets)"),
                                           ("self.loss = nn.CrossEntropyLoss()",
                                            "return self.loss(predictions, targets)"))),
             "torch.randn(batch_size, dim), torch.randint(0, dim, (batch_size,))", _CROSS_ENTROPY, "rows",
             "predictions, targets", "the cross-entropy of class scores against class indices"),
        Loss("triplet", *triplet, "torch.randn(batch_size, dim), torch.randn(batch_size, dim), "
             "torch.randn(batch_size, dim)", _TRIPLET.replace("${margin}", f"{margin}f"), "rows",
             "anchor, positive, negative", "the triplet margin loss"),
    ]


_REDUCE = """
// the block's sum: a shuffle tree per warp, then the first warp over the warps' sums
__device__ float ${block_sum}(float v) {
    __shared__ float warp_sums[32];
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffff, v, offset);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
    __syncthreads();
    v = threadIdx.x < blockDim.x / 32 ? warp_sums[threadIdx.x] : 0.0f;
    if (threadIdx.x < 32) {
        for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffff, v, offset);
    }
    return v;
}
"""

_ELEMENTWISE = """${includes}
""" + _REDUCE + """
// ${what}: each thread sums its elements' terms; each block adds its sum, divided by the count, into out
__global__ void ${kernel}(const float*${ptr} predictions, const float*${ptr} targets, float*${ptr} out, int64_t n,
                          float inv_count) {
    float acc = 0.0f;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float p = predictions[i];
        const float t = targets[i];
        acc += ${term};
    }
    acc = ${block_sum}(acc);
    if (threadIdx.x == 0) atomicAdd(out, acc * inv_count);
}

torch::Tensor ${host}(torch::Tensor predictions, torch::Tensor targets) {
${inputs}
    TORCH_CHECK(predictions.sizes() == targets.sizes(), "predictions and targets must have the same shape");
    auto out = torch::zeros({}, predictions.options());
    const int64_t n = predictions.numel();
    const int64_t rows = predictions.size(0);
    const int threads = ${block};
    const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 1024);
${stream}
    ${kernel}<<<blocks, threads, 0, stream>>>(predictions.data_ptr<float>(), targets.data_ptr<float>(),
                                              out.data_ptr<float>(), n, 1.0f / (float)${divisor});
${checked}
    return out;
}
"""

_CROSS_ENTROPY = """float m = -FLT_MAX;
        for (int c = lane; c < cols; c += 32) m = fmaxf(m, row[c]);
        for (int offset = 16; offset > 0; offset >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, offset));
        float s = 0.0f;
        for (int c = lane; c < cols; c += 32) s += expf(row[c] - m);
        for (int offset = 16; offset > 0; offset >>= 1) s += __shfl_xor_sync(0xffffffff, s, offset);
        const float term = m + logf(s) - row[labels[r]];"""

_TRIPLET = """// pairwise_distance adds eps to each difference
        float dp = 0.0f, dn = 0.0f;
        for (int c = lane; c < cols; c += 32) {
            const float a = row[c] + 1e-6f;
            dp += (a - positive[(int64_t)r * cols + c]) * (a - positive[(int64_t)r * cols + c]);
            dn += (a - negative[(int64_t)r * cols + c]) * (a - negative[(int64_t)r * cols + c]);
        }
        for (int offset = 16; offset > 0; offset >>= 1) {
            dp += __shfl_xor_sync(0xffffffff, dp, offset);
            dn += __shfl_xor_sync(0xffffffff, dn, offset);
        }
        const float term = fmaxf(sqrtf(dp) - sqrtf(dn) + ${margin}, 0.0f);"""

_ROWS = """${includes}
""" + _REDUCE + """
// ${what}: one warp per row computes the row's term; each block adds its rows' sum, divided by the rows, into out
__global__ void ${kernel}(const float*${ptr} x, ${params}float*${ptr} out, int64_t rows, int cols, float inv_count) {
    const int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    float mine = 0.0f;
    if (r < rows) {  // a whole warp takes this branch or skips it, so the shuffles inside stay full
        const float* row = x + r * cols;
        ${term}
        mine = lane == 0 ? term : 0.0f;
    }
    mine = ${block_sum}(mine);
    if (threadIdx.x == 0) atomicAdd(out, mine * inv_count);
}

torch::Tensor ${host}(${signature}) {
${inputs}
${checks}
    auto out = torch::zeros({}, x.options());
    const int64_t rows = x.size(0);
    const int cols = (int)x.size(1);
    const int threads = ${block};
    const int64_t blocks = (rows * 32 + threads - 1) / threads;
${stream}
    ${kernel}<<<(unsigned)blocks, threads, 0, stream>>>(x.data_ptr<float>(), ${pointers}out.data_ptr<float>(), rows,
                                                        cols, 1.0f / (float)rows);
${checked}
    return out;
}
"""


def _loss_task(rng: random.Random, name: str) -> RenderedTask:
    loss = rng.choice(elementwise_losses(rng) if name == "elementwise" else row_losses(rng))
    batch = rng.choice((64, 128, 256, 1000, 4096, 16384))
    dim = rng.choice((10, 100, 128, 1000, 4096))
    while batch * dim > 1 << 22:
        batch //= 2
    functional = "F." in loss.body
    reference = problem(
        init_params="", init_body=loss.init, forward_params=loss.names, forward_body=loss.body,
        constants=f"batch_size = {batch}\ndim = {dim}", inputs=loss.inputs, init_inputs="", functional=functional,
        what=loss.what, renames=False, rand_ok=loss.stem not in ("kl_div",))
    style = sample_style(rng, f"{loss.stem}_loss", (128, 256, 512))
    params = loss.names.split(", ")
    if name == "elementwise":
        cuda = style.fill(_ELEMENTWISE, includes=style.includes(), block_sum="block_sum",
                          kernel=style.kernel(), what=loss.stem.replace("_", " "), term=loss.term,
                          divisor=loss.divisor, inputs=style.inputs(*params))
        signature = "torch::Tensor predictions, torch::Tensor targets"
    else:
        labels = loss.stem == "cross_entropy"
        signature = "torch::Tensor x, " + ("torch::Tensor labels" if labels else
                                           "torch::Tensor positive, torch::Tensor negative")
        checks = ('    TORCH_CHECK(labels.is_cuda() && labels.scalar_type() == torch::kLong && labels.numel() == '
                  'x.size(0), "labels must be int64 class indices, one per row");') if labels else \
            '    TORCH_CHECK(positive.sizes() == x.sizes() && negative.sizes() == x.sizes(), "shapes must match");'
        tensors = ["x"] if labels else ["x", "positive", "negative"]
        cuda = style.fill(_ROWS, includes=style.includes("cfloat"), block_sum="block_sum",
                          kernel=style.kernel(), what=loss.stem.replace("_", " "), term=loss.term,
                          params=f"const int64_t*{style.ptr} labels, " if labels else
                          f"const float*{style.ptr} positive, const float*{style.ptr} negative, ",
                          pointers="labels.data_ptr<int64_t>(), " if labels else
                          "positive.data_ptr<float>(), negative.data_ptr<float>(), ",
                          signature=signature, inputs=style.inputs(*tensors), checks=checks)
    solution = solution_file(style, cuda=cuda, declaration=f"torch::Tensor {style.host}({signature});",
                             init_params="", init_body="", forward_params=loss.names,
                             call_args=", ".join(style.arg(p) for p in params))
    return RenderedTask(reference, solution, f"{loss.stem}-{'wide' if dim >= 1000 else 'narrow'}")


template("loss", "elementwise")(lambda rng: _loss_task(rng, "elementwise"))
template("loss", "row_warp")(lambda rng: _loss_task(rng, "rows"))
