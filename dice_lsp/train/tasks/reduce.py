"""Tasks that reduce along a dimension: sum / mean / max / min, and argmax / argmin (softmax, which also reduces a
row, is in softmax.py).

Templates: one thread per output for any dim (one block per row when the dim is the last, contiguous one), one warp
per row with shuffles, one block per row with a shared-memory tree.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from dice_lsp.train.tasks.catalog import RenderedTask, shape_names, sizes, template
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


# The host lines shared by every reduction (softmax's and scan's too): outer x r x inner around `dim`, and the
# output's shape.
GEOMETRY = """    int64_t d = dim < 0 ? dim + x.dim() : dim;
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


def _reduce_task(rng: random.Random, name: str) -> RenderedTask:
    rank = rng.choice((2, 3))
    shape = sizes(rng, rank, (1 << 14, 1 << 22))
    last = name != "thread_per_output" or rng.random() < 0.3
    dim = rank - 1 if last else rng.randrange(rank - 1)
    dim_text = rng.choice((-1, rank - 1)) if last else dim
    keepdim = rng.random() < 0.3
    op = rng.choice(reductions(rng, keepdim))
    names = shape_names(shape)
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
                      init=op.init, final=op.final, what=op.stem, inputs=style.inputs("x"), geometry=GEOMETRY,
                      shape=shape_lines, threads_name="THREADS" if style.naming % 2 else "BLOCK_SIZE",
                      row_kernel=style.kernel("rows"))
    solution = solution_file(style, cuda=cuda, declaration=f"torch::Tensor {style.host}(torch::Tensor x, int64_t dim);",
                             init_params="dim: int", init_body="self.dim = dim", forward_params="x",
                             call_args=f"{style.arg('x')}, self.dim")
    where = "last" if last else f"dim{dim}"
    return RenderedTask(reference, solution, f"{op.stem}-rank{rank}-{where}{'-keep' if keepdim else ''}")


for _name in _REDUCE_TEMPLATES:
    template("reduction", _name)(lambda rng, name=_name: _reduce_task(rng, name))


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


def _arg_task(rng: random.Random) -> RenderedTask:
    rank = rng.choice((2, 3))
    shape = sizes(rng, rank, (1 << 14, 1 << 22))
    dim = rng.randrange(rank)
    keepdim = rng.random() < 0.3
    op = rng.choice(("argmax", "argmin"))
    keep = ", keepdim=True" if keepdim else ""
    body = rng.choice((f"return torch.{op}(x, dim=self.dim{keep})", f"return x.{op}(dim=self.dim{keep})"))
    names = shape_names(shape)
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
                      geometry=GEOMETRY, shape=shape_lines, better=">" if op == "argmax" else "<")
    solution = solution_file(style, cuda=cuda, declaration=f"torch::Tensor {style.host}(torch::Tensor x, int64_t dim);",
                             init_params="dim: int", init_body="self.dim = dim", forward_params="x",
                             call_args=f"{style.arg('x')}, self.dim")
    return RenderedTask(reference, solution, f"{op}-rank{rank}-dim{dim}{'-keep' if keepdim else ''}")


template("reduction", "arg_thread_per_output")(_arg_task)
