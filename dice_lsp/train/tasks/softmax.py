"""Softmax and log-softmax tasks along a dimension (and scale + softmax, a fusion): a row's max, the sum of its
exponentials, then the output.

Templates: one warp per row with shuffles, one block per row with a shared-memory tree, a two-kernel version (row
statistics, then a normalising pass), and one thread per output line for a dim that is not the last.
"""

from __future__ import annotations

import random

from dice_lsp.train.tasks.catalog import RenderedTask, shape_names, sizes, template
from dice_lsp.train.tasks.problem import problem
from dice_lsp.train.tasks.reduce import GEOMETRY
from dice_lsp.train.tasks.style import sample_style, solution_file

_WARP_SOFTMAX = """${includes}

// ${what} over the last dim: one warp per row; max, then sum of exponentials, then the output
__global__ void ${kernel}(const float*${ptr} x, float*${ptr} y, int rows, int cols, float scale) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const float* in = x + (${idx})row * cols;
    float* out = y + (${idx})row * cols;
    float m = -FLT_MAX;
    for (int c = lane; c < cols; c += 32) m = fmaxf(m, in[c] * scale);
    for (int offset = 16; offset > 0; offset >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, offset));
    float s = 0.0f;
    for (int c = lane; c < cols; c += 32) s += expf(in[c] * scale - m);
    for (int offset = 16; offset > 0; offset >>= 1) s += __shfl_xor_sync(0xffffffff, s, offset);
    for (int c = lane; c < cols; c += 32) {
        float v = in[c] * scale;
        out[c] = ${output};
    }
}

torch::Tensor ${host}(torch::Tensor x${scale_param}) {
${inputs}
    int cols = (int)x.size(-1);
    int rows = (int)(x.numel() / cols);
    auto y = torch::empty_like(x);
    const int threads = ${block};
    const int blocks = (rows + threads / 32 - 1) / (threads / 32);
${stream}
    ${kernel}<<<blocks, threads, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), rows, cols, ${scale_value});
${checked}
    return y;
}
"""

_BLOCK_SOFTMAX = """${includes}

#define ${threads_name} ${block}

// a shared-memory tree over the block; every thread gets the result
__device__ float ${block_reduce}(float v, float* scratch, bool is_max) {
    scratch[threadIdx.x] = v;
    __syncthreads();
    for (int span = ${threads_name} / 2; span > 0; span >>= 1) {
        if (threadIdx.x < span) {
            float other = scratch[threadIdx.x + span];
            scratch[threadIdx.x] = is_max ? fmaxf(scratch[threadIdx.x], other) : scratch[threadIdx.x] + other;
        }
        __syncthreads();
    }
    float result = scratch[0];
    __syncthreads();
    return result;
}

// ${what} over the last dim: one block per row
__global__ void ${kernel}(const float*${ptr} x, float*${ptr} y, int cols, float scale) {
    __shared__ float scratch[${threads_name}];
    const float* in = x + (${idx})blockIdx.x * cols;
    float* out = y + (${idx})blockIdx.x * cols;
    float m = -FLT_MAX;
    for (int c = threadIdx.x; c < cols; c += ${threads_name}) m = fmaxf(m, in[c] * scale);
    m = ${block_reduce}(m, scratch, true);
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += ${threads_name}) s += expf(in[c] * scale - m);
    s = ${block_reduce}(s, scratch, false);
    for (int c = threadIdx.x; c < cols; c += ${threads_name}) {
        float v = in[c] * scale;
        out[c] = ${output};
    }
}

torch::Tensor ${host}(torch::Tensor x${scale_param}) {
${inputs}
    int cols = (int)x.size(-1);
    int rows = (int)(x.numel() / cols);
    auto y = torch::empty_like(x);
${stream}
    ${kernel}<<<rows, ${threads_name}, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), cols, ${scale_value});
${checked}
    return y;
}
"""

_TWO_KERNEL_SOFTMAX = """${includes}

// pass 1: each warp finds its row's max and sum of exponentials in one sweep (online softmax)
__global__ void ${stats_kernel}(const float*${ptr} x, float2*${ptr} stats, int rows, int cols, float scale) {
    int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float* in = x + (${idx})row * cols;
    float m = -FLT_MAX, s = 0.0f;
    for (int c = lane; c < cols; c += 32) {
        float v = in[c] * scale;
        float next = fmaxf(m, v);
        s = s * expf(m - next) + expf(v - next);
        m = next;
    }
    for (int offset = 16; offset > 0; offset /= 2) {
        float m2 = __shfl_down_sync(0xffffffff, m, offset);
        float s2 = __shfl_down_sync(0xffffffff, s, offset);
        float next = fmaxf(m, m2);
        s = s * expf(m - next) + s2 * expf(m2 - next);
        m = next;
    }
    if (lane == 0) stats[row] = make_float2(m, s);
}

// pass 2: every element reads its row's statistics
__global__ void ${kernel}(const float*${ptr} x, const float2*${ptr} stats, float*${ptr} y, ${idx} n, int cols,
                          float scale) {
    for (${idx} i = (${idx})blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (${idx})gridDim.x * blockDim.x) {
        float2 st = stats[i / cols];
        float m = st.x, s = st.y;
        float v = x[i] * scale;
        y[i] = ${output};
    }
}

torch::Tensor ${host}(torch::Tensor x${scale_param}) {
${inputs}
    int cols = (int)x.size(-1);
    int rows = (int)(x.numel() / cols);
    auto y = torch::empty_like(x);
    auto stats = torch::empty({rows, 2}, x.options());
    float2* stats_ptr = reinterpret_cast<float2*>(stats.data_ptr<float>());
    const int threads = ${block};
${stream}
    ${stats_kernel}<<<(rows * 32 + threads - 1) / threads, threads, 0, stream>>>(x.data_ptr<float>(), stats_ptr,
                                                                                 rows, cols, ${scale_value});
${checked}
    ${idx} n = x.numel();
    int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 4096);
    ${kernel}<<<blocks, threads, 0, stream>>>(x.data_ptr<float>(), stats_ptr, y.data_ptr<float>(), n, cols,
                                              ${scale_value});
${checked_again}
    return y;
}
"""

_COLUMN_SOFTMAX = """${includes}

// a block-wide ${reduce_what}: a shuffle tree in each warp, then every warp combines the warps' results
__device__ float ${block_reduce}(float v, float* scratch, bool is_max) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        float other = __shfl_xor_sync(0xffffffff, v, offset);
        v = is_max ? fmaxf(v, other) : v + other;
    }
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
    __syncthreads();
    int lane = threadIdx.x % 32;
    v = lane < (int)(blockDim.x / 32) ? scratch[lane] : (is_max ? -FLT_MAX : 0.0f);
    for (int offset = 16; offset > 0; offset >>= 1) {
        float other = __shfl_xor_sync(0xffffffff, v, offset);
        v = is_max ? fmaxf(v, other) : v + other;
    }
    __syncthreads();  // scratch is written again by the next call
    return v;
}

// ${what} along the last dim (inner == 1): one block per row, coalesced
__global__ void ${row_kernel}(const float*${ptr} x, float*${ptr} y, int cols, float scale) {
    __shared__ float scratch[32];
    const float* in = x + (${idx})blockIdx.x * cols;
    float* out = y + (${idx})blockIdx.x * cols;
    float m = -FLT_MAX;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, in[c] * scale);
    m = ${block_reduce}(m, scratch, true);
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += expf(in[c] * scale - m);
    s = ${block_reduce}(s, scratch, false);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float v = in[c] * scale;
        out[c] = ${output};
    }
}

// ${what} along any other dim: [outer, r, inner], one thread per (outer, inner) column, three sweeps down it
__global__ void ${kernel}(const float*${ptr} x, float*${ptr} y, ${idx} outer, ${idx} r, ${idx} inner, float scale) {
    ${idx} t = (${idx})blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= outer * inner) return;
    ${idx} start = (t / inner) * r * inner + t % inner;
    const float* in = x + start;
    float* out = y + start;
    float m = -FLT_MAX;
    for (${idx} k = 0; k < r; ++k) m = fmaxf(m, in[k * inner] * scale);
    float s = 0.0f;
    for (${idx} k = 0; k < r; ++k) s += expf(in[k * inner] * scale - m);
    for (${idx} k = 0; k < r; ++k) {
        float v = in[k * inner] * scale;
        out[k * inner] = ${output};
    }
}

torch::Tensor ${host}(torch::Tensor x, int64_t dim${scale_param}) {
${inputs}
${geometry}
    auto y = torch::empty_like(x);
    const int threads = ${block};
${stream}
    if (inner == 1) {
        ${row_kernel}<<<(unsigned)outer, threads, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), (int)r,
                                                               ${scale_value});
    } else {
        const int blocks = (int)((outer * inner + threads - 1) / threads);
        ${kernel}<<<blocks, threads, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), outer, r, inner,
                                                  ${scale_value});
    }
${checked}
    return y;
}
"""

_SOFTMAX_TEMPLATES = {"warp_row": _WARP_SOFTMAX, "block_row": _BLOCK_SOFTMAX, "two_kernel": _TWO_KERNEL_SOFTMAX,
                      "column": _COLUMN_SOFTMAX}


def _softmax_reference(rng: random.Random, log: bool, dim_text: str, scaled: bool) -> tuple[str, str, bool]:
    """(init lines, forward body, uses F) of a softmax Model in one of the ways people write it."""
    fn = "log_softmax" if log else "softmax"
    x = "x * self.scale" if scaled else "x"
    way = rng.randrange(3)
    if way == 0:
        return "", f"return torch.{fn}({x}, dim={dim_text})", False
    if way == 1:
        return "", f"return F.{fn}({x}, dim={dim_text})", True
    layer = "LogSoftmax" if log else "Softmax"
    return f"self.act = nn.{layer}(dim={dim_text})", f"return self.act({x})", False


def softmax_task(rng: random.Random, name: str, family: str) -> RenderedTask:
    scaled = family == "fusion"
    log = rng.random() < 0.4 and not scaled
    rank = rng.choice((2, 3))
    shape = sizes(rng, rank, (1 << 14, 1 << 22))
    dim = rng.randrange(rank - 1) if name == "column" and rng.random() < 0.7 else rank - 1
    dim_literal = str(rng.choice((-1, rank - 1)) if dim == rank - 1 else dim)
    names = shape_names(shape)
    stem = ("scaled_" if scaled else "") + ("log_softmax" if log else "softmax")
    style = sample_style(rng, stem, (128, 256, 512))
    scale = rng.choice((0.125, 0.5, 2.0, 0.0883883)) if scaled else None
    init_params = "scale: float" if scaled else ""
    init, forward, functional = _softmax_reference(rng, log, dim_literal, scaled)
    init_body = ("self.scale = scale\n" if scaled else "") + init
    output = "v - m - logf(s)" if log else rng.choice(("expf(v - m) / s", "expf(v - m) * (1.0f / s)"))
    reference = problem(
        init_params=init_params, init_body=init_body, forward_params="x", forward_body=forward,
        constants="\n".join(f"{n} = {v}" for n, v in zip(names, shape)) + (f"\nscale = {scale}" if scaled else ""),
        inputs=f"torch.randn({', '.join(names)})", init_inputs="scale" if scaled else "", functional=functional,
        what=("a scaled " if scaled else "a ") + ("log-softmax" if log else "softmax") + f" over dimension {dim_literal}",
        grow=None if name == "column" else "first")
    cuda = style.fill(_SOFTMAX_TEMPLATES[name], includes=style.includes("cfloat"), kernel=style.kernel(),
                      stats_kernel=style.kernel("stats"), output=output, what=stem.replace("_", " "),
                      inputs=style.inputs("x"), geometry=GEOMETRY, block_reduce="block_reduce",
                      row_kernel=style.kernel("rows"), reduce_what="max or sum",
                      threads_name="THREADS" if style.naming % 2 else "BLOCK", checked_again=style.checked().replace(
                          "cudaError_t err", "err") if style.launch_check == "cuda" else style.checked(),
                      scale_param=", double scale" if scaled else "",
                      scale_value="(float)scale" if scaled else "1.0f")
    params = (["int64_t dim"] if name == "column" else []) + (["double scale"] if scaled else [])
    declaration = f"torch::Tensor {style.host}(torch::Tensor x{''.join(', ' + p for p in params)});"
    args = [style.arg("x")] + ([dim_literal] if name == "column" else []) + (["self.scale"] if scaled else [])
    solution = solution_file(style, cuda=cuda, declaration=declaration, init_params=init_params,
                             init_body="self.scale = scale" if scaled else "", forward_params="x",
                             call_args=", ".join(args))
    where = "last" if dim == rank - 1 else f"dim{dim}"
    return RenderedTask(reference, solution, f"{stem}-rank{rank}-{where}-{'small' if shape[-1] < 1024 else 'wide'}")


for _name in _SOFTMAX_TEMPLATES:
    template("softmax", _name)(lambda rng, name=_name: softmax_task(rng, name, "softmax"))
template("fusion", "scale_softmax_warp")(lambda rng: softmax_task(rng, "warp_row", "fusion"))
template("fusion", "scale_softmax_two_kernel")(lambda rng: softmax_task(rng, "two_kernel", "fusion"))
