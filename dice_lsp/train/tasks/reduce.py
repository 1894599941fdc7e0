"""Tasks that reduce along a dimension: sum / mean / max / min, softmax and log-softmax (and scale + softmax).

Templates: one thread per output for any dim (one block per row when the dim is the last, contiguous one), one warp
per row with shuffles, one block per row with a shared-memory tree, and for softmax a two-kernel version (row
statistics, then a normalising pass).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from dice_lsp.train.tasks.catalog import Draft, sizes, template
from dice_lsp.train.tasks.elementwise import _shape_names
from dice_lsp.train.tasks.problem import problem
from dice_lsp.train.tasks.style import sample_style, solution_file


@dataclass(frozen=True)
class Reduction:
    stem: str
    torch: str  # Python expression of x and `dim` (a format field)
    init: str
    combine: str  # CUDA expression of floats a and b
    final: str  # CUDA expression of the accumulator `acc` and the reduced length `r`


def reductions(rng: random.Random, keepdim: bool) -> list[Reduction]:
    keep = ", keepdim=True" if keepdim else ""
    return [
        Reduction("sum", rng.choice(("torch.sum(x, dim={dim}" + keep + ")", "x.sum(dim={dim}" + keep + ")")),
                  "0.0f", "a + b", "acc"),
        Reduction("mean", rng.choice(("torch.mean(x, dim={dim}" + keep + ")", "x.mean(dim={dim}" + keep + ")")),
                  "0.0f", "a + b", "acc / (float)r"),
        Reduction("max", rng.choice(("torch.amax(x, dim={dim}" + keep + ")",
                                     "torch.max(x, dim={dim}" + keep + ")[0]")), "-FLT_MAX", "fmaxf(a, b)", "acc"),
        Reduction("min", rng.choice(("torch.amin(x, dim={dim}" + keep + ")",
                                     "torch.min(x, dim={dim}" + keep + ").values")), "FLT_MAX", "fminf(a, b)", "acc"),
    ]


# The host lines shared by every reduction: outer x r x inner around `dim`, and the output's shape.
_GEOMETRY = """    int64_t d = dim < 0 ? dim + x.dim() : dim;
    TORCH_CHECK(d >= 0 && d < x.dim(), "dim out of range");
    int64_t outer = 1, inner = 1, r = x.size(d);
    for (int64_t k = 0; k < d; ++k) outer *= x.size(k);
    for (int64_t k = d + 1; k < x.dim(); ++k) inner *= x.size(k);"""

_REDUCE_HEAD = """${includes}

__device__ __forceinline__ float ${combine_fn}(float a, float b) {
    return ${combine};
}
"""

_THREAD_PER_OUTPUT = _REDUCE_HEAD + """
// ${what} along any dim: the input is [outer, r, inner] and each thread owns one (outer, inner) output
__global__ void ${kernel}(const float*${ptr} x, float*${ptr} y, ${idx} outer, ${idx} r, ${idx} inner) {
    ${idx} t = (${idx})blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= outer * inner) return;
    const float* base = x + (t / inner) * r * inner + t % inner;
    float acc = ${init};
    for (${idx} k = 0; k < r; ++k) {
        acc = ${combine_fn}(acc, base[k * inner]);
    }
    y[t] = ${final};
}

// ${what} along the last dim (inner == 1): one block per row reads it coalesced; a shuffle tree in each warp,
// then one over the warps' results
__global__ void ${row_kernel}(const float*${ptr} x, float*${ptr} y, int r) {
    __shared__ float warp_acc[32];
    const float* in = x + (${idx})blockIdx.x * r;
    float acc = ${init};
    for (int k = threadIdx.x; k < r; k += blockDim.x) {
        acc = ${combine_fn}(acc, in[k]);
    }
    for (int offset = 16; offset > 0; offset /= 2) {
        acc = ${combine_fn}(acc, __shfl_down_sync(0xffffffff, acc, offset));
    }
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) warp_acc[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        acc = lane < (int)(blockDim.x / 32) ? warp_acc[lane] : ${init};
        for (int offset = 16; offset > 0; offset /= 2) {
            acc = ${combine_fn}(acc, __shfl_down_sync(0xffffffff, acc, offset));
        }
        if (lane == 0) y[blockIdx.x] = ${final};
    }
}

torch::Tensor ${host}(torch::Tensor x, int64_t dim) {
${inputs}
${geometry}
${shape}
    const int threads = ${block};
${stream}
    if (inner == 1) {
        ${row_kernel}<<<(unsigned)outer, threads, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), (int)r);
    } else {
        const int blocks = (int)((outer * inner + threads - 1) / threads);
        ${kernel}<<<blocks, threads, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), outer, r, inner);
    }
${checked}
    return y;
}
"""

_WARP_PER_ROW = _REDUCE_HEAD + """
// ${what} along the last dim: one warp per row, lanes stride the row, then a shuffle tree
__global__ void ${kernel}(const float*${ptr} x, float*${ptr} y, int rows, int r) {
    int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    // the whole warp leaves together, so the full shuffle mask below stays valid
    if (row >= rows) return;
    const float* in = x + (${idx})row * r;
    float acc = ${init};
    for (int k = lane; k < r; k += 32) {
        acc = ${combine_fn}(acc, in[k]);
    }
    for (int offset = 16; offset > 0; offset /= 2) {
        acc = ${combine_fn}(acc, __shfl_down_sync(0xffffffff, acc, offset));
    }
    if (lane == 0) {
        y[row] = ${final};
    }
}

torch::Tensor ${host}(torch::Tensor x, int64_t dim) {
${inputs}
${geometry}
    TORCH_CHECK(inner == 1, "this kernel reduces the last dim only");
${shape}
    const int threads = ${block};
    const int rows_per_block = threads / 32;
    const int blocks = (int)((outer + rows_per_block - 1) / rows_per_block);
${stream}
    ${kernel}<<<blocks, threads, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), (int)outer, (int)r);
${checked}
    return y;
}
"""

_BLOCK_TREE = _REDUCE_HEAD + """
#define ${threads_name} ${block}

// ${what} along the last dim: one block per row and a tree in shared memory
__global__ void ${kernel}(const float*${ptr} x, float*${ptr} y, int r) {
    __shared__ float partial[${threads_name}];
    const float* in = x + (${idx})blockIdx.x * r;
    float acc = ${init};
    for (int k = threadIdx.x; k < r; k += ${threads_name}) {
        acc = ${combine_fn}(acc, in[k]);
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int span = ${threads_name} / 2; span > 0; span >>= 1) {
        if (threadIdx.x < span) {
            partial[threadIdx.x] = ${combine_fn}(partial[threadIdx.x], partial[threadIdx.x + span]);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        acc = partial[0];
        y[blockIdx.x] = ${final};
    }
}

torch::Tensor ${host}(torch::Tensor x, int64_t dim) {
${inputs}
${geometry}
    TORCH_CHECK(inner == 1, "this kernel reduces the last dim only");
${shape}
${stream}
    ${kernel}<<<(unsigned)outer, ${threads_name}, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), (int)r);
${checked}
    return y;
}
"""

_REDUCE_TEMPLATES = {"thread_per_output": _THREAD_PER_OUTPUT, "warp_per_row": _WARP_PER_ROW,
                     "block_tree": _BLOCK_TREE}


def _reduce_task(rng: random.Random, name: str) -> Draft:
    rank = rng.choice((2, 3))
    shape = sizes(rng, rank, (1 << 14, 1 << 22))
    last = name != "thread_per_output" or rng.random() < 0.3
    dim = rank - 1 if last else rng.randrange(rank - 1)
    dim_text = rng.choice((-1, rank - 1)) if last else dim
    keepdim = rng.random() < 0.3
    op = rng.choice(reductions(rng, keepdim))
    names = _shape_names(shape)
    style = sample_style(rng, f"{op.stem}_reduce", (128, 256, 512))
    keep_line = ("    sizes[d] = 1;" if keepdim else "    sizes.erase(sizes.begin() + d);")
    shape_lines = f"    auto sizes = x.sizes().vec();\n{keep_line}\n    auto y = torch::empty(sizes, x.options());"
    reference = problem(
        init_params="dim: int", init_body="self.dim = dim", forward_params="x",
        forward_body=f"return {op.torch.format(dim='self.dim')}",
        constants="\n".join(f"{n} = {v}" for n, v in zip(names, shape)) + f"\nreduce_dim = {dim_text}",
        inputs=f"torch.randn({', '.join(names)})", init_inputs="reduce_dim",
        what=f"a {op.stem} reduction over one dimension")
    cuda = style.fill(_REDUCE_TEMPLATES[name], includes=style.includes("cfloat"), kernel=style.kernel(),
                      combine=op.combine, combine_fn=f"combine_{op.stem}" if style.naming < 2 else f"{op.stem}_op",
                      init=op.init, final=op.final, what=op.stem, inputs=style.inputs("x"), geometry=_GEOMETRY,
                      shape=shape_lines, threads_name="THREADS" if style.naming % 2 else "BLOCK_SIZE",
                      row_kernel=style.kernel("rows"))
    solution = solution_file(style, cuda=cuda, declaration=f"torch::Tensor {style.host}(torch::Tensor x, int64_t dim);",
                             init_params="dim: int", init_body="self.dim = dim", forward_params="x",
                             call_args=f"{style.arg('x')}, self.dim")
    where = "last" if last else f"dim{dim}"
    return Draft(reference, solution, f"{op.stem}-rank{rank}-{where}{'-keep' if keepdim else ''}")


for _name in _REDUCE_TEMPLATES:
    template("reduction", _name)(lambda rng, name=_name: _reduce_task(rng, name))


# -- softmax ----------------------------------------------------------------------------------------------------------
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


def softmax_task(rng: random.Random, name: str, family: str) -> Draft:
    scaled = family == "fusion"
    log = rng.random() < 0.4 and not scaled
    rank = rng.choice((2, 3))
    shape = sizes(rng, rank, (1 << 14, 1 << 22))
    dim = rng.randrange(rank - 1) if name == "column" and rng.random() < 0.7 else rank - 1
    dim_literal = str(rng.choice((-1, rank - 1)) if dim == rank - 1 else dim)
    names = _shape_names(shape)
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
                      inputs=style.inputs("x"), geometry=_GEOMETRY, block_reduce="block_reduce",
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
    return Draft(reference, solution, f"{stem}-rank{rank}-{where}-{'small' if shape[-1] < 1024 else 'wide'}")


for _name in _SOFTMAX_TEMPLATES:
    template("softmax", _name)(lambda rng, name=_name: softmax_task(rng, name, "softmax"))
template("fusion", "scale_softmax_warp")(lambda rng: softmax_task(rng, "warp_row", "fusion"))
template("fusion", "scale_softmax_two_kernel")(lambda rng: softmax_task(rng, "two_kernel", "fusion"))


# -- argmax / argmin --------------------------------------------------------------------------------------------------
_ARG = """${includes}

// ${what} along any dim: the input is [outer, r, inner]; each thread walks one line and keeps the first best index
__global__ void ${kernel}(const float*${ptr} x, int64_t*${ptr} y, int64_t outer, int64_t r, int64_t inner) {
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= outer * inner) return;
    const float* line = x + (t / inner) * r * inner + t % inner;
    float best = line[0];
    int64_t at = 0;
    for (int64_t k = 1; k < r; ++k) {
        const float v = line[k * inner];
        if (v ${better} best) {
            best = v;
            at = k;
        }
    }
    y[t] = at;
}

torch::Tensor ${host}(torch::Tensor x, int64_t dim) {
${inputs}
${geometry}
${shape}
    const int threads = ${block};
    const int blocks = (int)((outer * inner + threads - 1) / threads);
${stream}
    ${kernel}<<<blocks, threads, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<int64_t>(), outer, r, inner);
${checked}
    return y;
}
"""


def _arg_task(rng: random.Random) -> Draft:
    rank = rng.choice((2, 3))
    shape = sizes(rng, rank, (1 << 14, 1 << 22))
    dim = rng.randrange(rank)
    keepdim = rng.random() < 0.3
    op = rng.choice(("argmax", "argmin"))
    keep = ", keepdim=True" if keepdim else ""
    body = rng.choice((f"return torch.{op}(x, dim=self.dim{keep})", f"return x.{op}(dim=self.dim{keep})"))
    names = _shape_names(shape)
    reference = problem(
        init_params="dim: int", init_body="self.dim = dim", forward_params="x", forward_body=body,
        constants="\n".join(f"{n} = {v}" for n, v in zip(names, shape)) + f"\nreduce_dim = {dim}",
        inputs=f"torch.randn({', '.join(names)})", init_inputs="reduce_dim",
        what=f"the index of the {'largest' if op == 'argmax' else 'smallest'} value along one dimension",
        grow=None if dim == 0 else "first")
    style = sample_style(rng, op)
    keep_line = "    sizes[d] = 1;" if keepdim else "    sizes.erase(sizes.begin() + d);"
    shape_lines = (f"    auto sizes = x.sizes().vec();\n{keep_line}\n"
                   "    auto y = torch::empty(sizes, x.options().dtype(torch::kLong));")
    cuda = style.fill(_ARG, includes=style.includes(), kernel=style.kernel(), what=op, inputs=style.inputs("x"),
                      geometry=_GEOMETRY, shape=shape_lines, better=">" if op == "argmax" else "<")
    solution = solution_file(style, cuda=cuda, declaration=f"torch::Tensor {style.host}(torch::Tensor x, int64_t dim);",
                             init_params="dim: int", init_body="self.dim = dim", forward_params="x",
                             call_args=f"{style.arg('x')}, self.dim")
    return Draft(reference, solution, f"{op}-rank{rank}-dim{dim}{'-keep' if keepdim else ''}")


template("reduction", "arg_thread_per_output")(_arg_task)
