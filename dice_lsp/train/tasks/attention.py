"""Scaled dot-product attention over [batch, heads, length, head_dim] queries, keys and values, optionally causal,
as F.scaled_dot_product_attention or written out (softmax of Q K^T / sqrt(d), times V).

Template: one block per query row; the row's scores live in shared memory, then a block-wide max and sum, then
each thread writes some of the row's output features.
"""

from __future__ import annotations

import random

from dice_lsp.train.tasks.catalog import RenderedTask, template
from dice_lsp.train.tasks.problem import problem
from dice_lsp.train.tasks.style import sample_style, solution_file

_ATTENTION = """${includes}

// a block-wide max or sum; every thread gets the result
__device__ float ${block_reduce}(float v, float* scratch, bool is_max) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float other = __shfl_xor_sync(0xffffffff, v, offset);
        v = is_max ? fmaxf(v, other) : v + other;
    }
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
    __syncthreads();
    v = scratch[0];
    for (int w = 1; w < (int)(blockDim.x / 32); ++w) v = is_max ? fmaxf(v, scratch[w]) : v + scratch[w];
    __syncthreads();
    return v;
}

// ${what}: one block per (batch * head, query); scores in shared memory, then softmax, then scores @ V
__global__ void ${kernel}(const float*${ptr} q, const float*${ptr} k, const float*${ptr} v, float*${ptr} out,
                          int length_q, int length_k, int head_dim, float scale, bool causal) {
    extern __shared__ float shared[];
    float* scores = shared;  // length_k
    float* query = shared + length_k;  // head_dim
    __shared__ float scratch[32];
    const int64_t bh = blockIdx.x / length_q;
    const int i = blockIdx.x % length_q;
    const float* qi = q + ((int64_t)bh * length_q + i) * head_dim;
    const float* kb = k + (int64_t)bh * length_k * head_dim;
    const float* vb = v + (int64_t)bh * length_k * head_dim;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) query[d] = qi[d];
    __syncthreads();
    float m = -FLT_MAX;
    for (int j = threadIdx.x; j < length_k; j += blockDim.x) {
        float s = -FLT_MAX;
        if (!causal || j <= i) {
            s = 0.0f;
            for (int d = 0; d < head_dim; ++d) s += query[d] * kb[(int64_t)j * head_dim + d];
            s *= scale;
        }
        scores[j] = s;
        m = fmaxf(m, s);
    }
    m = ${block_reduce}(m, scratch, true);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < length_k; j += blockDim.x) {
        const float p = (!causal || j <= i) ? expf(scores[j] - m) : 0.0f;
        scores[j] = p;
        sum += p;
    }
    sum = ${block_reduce}(sum, scratch, false);
    const float inv = 1.0f / sum;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < length_k; ++j) acc += scores[j] * vb[(int64_t)j * head_dim + d];
        out[((int64_t)bh * length_q + i) * head_dim + d] = acc * inv;
    }
}

torch::Tensor ${host}(torch::Tensor q, torch::Tensor k, torch::Tensor v, bool causal) {
${inputs}
    TORCH_CHECK(q.dim() == 4 && k.sizes() == v.sizes() && q.size(3) == k.size(3), "expected [B, H, L, D] inputs");
    const int length_q = (int)q.size(2), length_k = (int)k.size(2), head_dim = (int)q.size(3);
    const int64_t rows = q.size(0) * q.size(1) * length_q;
    auto out = torch::empty_like(q);
    const size_t shared_bytes = (size_t)(length_k + head_dim) * sizeof(float);
    TORCH_CHECK(shared_bytes <= 48 * 1024, "the key length is too long for one block's shared memory");
${stream}
    ${kernel}<<<(unsigned)rows, ${block}, shared_bytes, stream>>>(q.data_ptr<float>(), k.data_ptr<float>(),
        v.data_ptr<float>(), out.data_ptr<float>(), length_q, length_k, head_dim, 1.0f / sqrtf((float)head_dim),
        causal);
${checked}
    return out;
}
"""


def _attention_task(rng: random.Random) -> RenderedTask:
    causal = rng.random() < 0.4
    batch, heads = rng.choice((1, 2, 4, 8, 16)), rng.choice((1, 4, 8, 12))
    length = rng.choice((64, 128, 197, 256, 512, 1024))
    head_dim = rng.choice((32, 64, 80, 128))
    while batch * heads * length * length * head_dim > 1 << 31 and batch > 1:
        batch //= 2
    written = rng.random() < 0.4
    if written:
        body = ("scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))\n"
                + ("mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()\n"
                   "scores = scores.masked_fill(~mask, float(\"-inf\"))\n" if causal else "")
                + "return torch.softmax(scores, dim=-1) @ v")
    else:
        body = f"return F.scaled_dot_product_attention(q, k, v{', is_causal=True' if causal else ''})"
    names = "batch_size, num_heads, seq_len, head_dim"
    reference = problem(
        init_params="", init_body="", forward_params="q, k, v", forward_body=body,
        constants=f"batch_size = {batch}\nnum_heads = {heads}\nseq_len = {length}\nhead_dim = {head_dim}",
        inputs=f"torch.randn({names}), torch.randn({names}), torch.randn({names})", init_inputs="",
        functional=not written, imports=("math",) if written else (), renames=False, max_gb=1.0,
        what=("causal " if causal else "") + "scaled dot-product attention")
    style = sample_style(rng, "attention", (64, 128, 256))
    cuda = style.fill(_ATTENTION, includes=style.includes("cfloat"), kernel=style.kernel(), what="attention",
                      block_reduce="block_reduce" if style.naming % 2 else "reduce_block", inputs=style.inputs("q", "k", "v"))
    solution = solution_file(style, cuda=cuda,
                             declaration=f"torch::Tensor {style.host}(torch::Tensor q, torch::Tensor k, "
                                         "torch::Tensor v, bool causal);",
                             init_params="", init_body="", forward_params="q, k, v",
                             call_args=f"{style.arg('q')}, {style.arg('k')}, {style.arg('v')}, {causal}")
    shape_class = f"{'causal' if causal else 'full'}-d{head_dim}-{'long' if length >= 512 else 'short'}"
    return RenderedTask(reference, solution, shape_class)


template("attention", "block_per_query")(_attention_task)
