"""Elementwise tasks: unary math, activations and binary ops with broadcasting, each one kernel over the output.

Templates: one element per thread, a grid-stride loop, float4 vectors (when the last dim allows) and, for
broadcasting, row/column index maps or a general strided map.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from dice_lsp.train.tasks.catalog import RenderedTask, shape_names, size_class, sizes, template
from dice_lsp.train.tasks.problem import problem
from dice_lsp.train.tasks.style import Style, sample_style, solution_file


@dataclass(frozen=True)
class Unary:
    stem: str
    torch: str  # Python expression of `x`
    cuda: str  # CUDA expression of the float `v`
    functional: bool = False
    positive: bool = False  # the input must be positive (log, sqrt)
    imports: tuple[str, ...] = ()  # modules the reference imports besides torch


def activations(rng: random.Random) -> list[Unary]:
    slope = rng.choice((0.01, 0.1, 0.2))
    bound = rng.choice((1.0, 0.5, 2.0))
    return [
        Unary("relu", "torch.relu(x)", "fmaxf(v, 0.0f)"),
        Unary("gelu_tanh", 'F.gelu(x, approximate="tanh")',
              "0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)))", True),
        Unary("gelu", "F.gelu(x)", "0.5f * v * (1.0f + erff(v * 0.7071067811865476f))", True),
        Unary("silu", "F.silu(x)", "v / (1.0f + expf(-v))", True),
        Unary("sigmoid", "torch.sigmoid(x)", "1.0f / (1.0f + expf(-v))"),
        Unary("tanh", "torch.tanh(x)", "tanhf(v)"),
        Unary("leaky_relu", f"F.leaky_relu(x, negative_slope={slope})", f"v > 0.0f ? v : {slope}f * v", True),
        Unary("softplus", "F.softplus(x)", "v > 20.0f ? v : log1pf(expf(v))", True),
        Unary("hardswish", "F.hardswish(x)", "v * fminf(fmaxf(v + 3.0f, 0.0f), 6.0f) / 6.0f", True),
        Unary("hardsigmoid", "F.hardsigmoid(x)", "fminf(fmaxf(v / 6.0f + 0.5f, 0.0f), 1.0f)", True),
        Unary("elu", "F.elu(x)", "v > 0.0f ? v : expm1f(v)", True),
        Unary("mish", "F.mish(x)", "v * tanhf(v > 20.0f ? v : log1pf(expf(v)))", True),
        Unary("selu", rng.choice(("torch.selu(x)", "F.selu(x)")),
              "1.0507009873554805f * (v > 0.0f ? v : 1.6732632423543772f * expm1f(v))", True),
        Unary("hardtanh", f"F.hardtanh(x, min_val={-bound}, max_val={bound})", f"fminf(fmaxf(v, {-bound}f), {bound}f)",
              True),
        Unary("softsign", rng.choice(("F.softsign(x)", "x / (1 + torch.abs(x))")), "v / (1.0f + fabsf(v))", True),
        Unary("swish", "x * torch.sigmoid(x)", "v / (1.0f + expf(-v))"),
        Unary("new_gelu", "0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))",
              "0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)))", imports=("math",)),
        Unary("relu6", "F.relu6(x)", "fminf(fmaxf(v, 0.0f), 6.0f)", True),
    ]


def unaries(rng: random.Random) -> list[Unary]:
    scale = rng.choice((0.5, 2.0, 3.0))
    return [
        Unary("exp", "torch.exp(x)", "expf(v)"),
        Unary("abs", "torch.abs(x)", "fabsf(v)"),
        Unary("square", "x * x", "v * v"),
        Unary("neg_scale", f"-x * {scale}", f"-v * {scale}f"),
        Unary("sin", "torch.sin(x)", "sinf(v)"),
        Unary("cos", "torch.cos(x)", "cosf(v)"),
        Unary("log", "torch.log(x)", "logf(v)", positive=True),
        Unary("sqrt", "torch.sqrt(x)", "sqrtf(v)", positive=True),
        Unary("rsqrt", "torch.rsqrt(x)", "rsqrtf(v)", positive=True),
        Unary("reciprocal", "1.0 / x", "1.0f / v", positive=True),
        Unary("clamp", "torch.clamp(x, min=-1.0, max=1.0)", "fminf(fmaxf(v, -1.0f), 1.0f)"),
    ]


def _shape_text(shape: list[int]) -> tuple[str, str]:
    """Module-level size constants and the tuple text that uses them, KernelBench style."""
    names = shape_names(shape)
    constants = "\n".join(f"{name} = {value}" for name, value in zip(names, shape))
    return constants, ", ".join(names)


def _random(shape: str, positive: bool) -> str:
    return f"torch.rand({shape}) + 0.1" if positive else f"torch.randn({shape})"


_ONE_PER_THREAD = """${includes}

// ${what}: one thread per element
__global__ void ${kernel}(const float*${ptr} x, float*${ptr} y, ${idx} n) {
    ${idx} i = (${idx})blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = ${expr};
    }
}

torch::Tensor ${host}(torch::Tensor x) {
${inputs}
    auto y = torch::empty_like(x);
    ${idx} n = x.numel();
    const int threads = ${block};
    const int blocks = (int)((n + threads - 1) / threads);
${stream}
    ${kernel}<<<blocks, threads, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
${checked}
    return y;
}
"""

_GRID_STRIDE = """${includes}

__device__ __forceinline__ float ${device}(float v) {
    return ${expr};
}

// ${what}: a grid-stride loop, so a capped grid covers any size
__global__ void ${kernel}(const float*${ptr} in, float*${ptr} out, ${idx} count) {
    ${idx} stride = (${idx})gridDim.x * blockDim.x;
    for (${idx} i = (${idx})blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        out[i] = ${device}(in[i]);
    }
}

torch::Tensor ${host}(torch::Tensor x) {
${inputs}
    auto out = torch::empty_like(x);
    ${idx} count = x.numel();
    int block = ${block};
    int grid = (int)std::min<int64_t>((count + block - 1) / block, 4096);
${stream}
    ${kernel}<<<grid, block, 0, stream>>>(x.data_ptr<float>(), out.data_ptr<float>(), count);
${checked}
    return out;
}
"""

_FLOAT4 = """${includes}

__device__ __forceinline__ float ${device}(float v) {
    return ${expr};
}

// ${what}: four elements per thread through float4 loads and stores
__global__ void ${kernel}(const float4*${ptr} x4, float4*${ptr} y4, ${idx} n4) {
    ${idx} i = (${idx})blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    float4 v = x4[i];
    v.x = ${device}(v.x);
    v.y = ${device}(v.y);
    v.z = ${device}(v.z);
    v.w = ${device}(v.w);
    y4[i] = v;
}

torch::Tensor ${host}(torch::Tensor x) {
${inputs}
    TORCH_CHECK(x.numel() % 4 == 0, "x.numel() must be a multiple of 4 for float4 access");
    auto y = torch::empty_like(x);
    ${idx} n4 = x.numel() / 4;
    const int threads = ${block};
    const int blocks = (int)((n4 + threads - 1) / threads);
${stream}
    ${kernel}<<<blocks, threads, 0, stream>>>(reinterpret_cast<const float4*>(x.data_ptr<float>()),
                                              reinterpret_cast<float4*>(y.data_ptr<float>()), n4);
${checked}
    return y;
}
"""

_UNARY_TEMPLATES = {"one_per_thread": _ONE_PER_THREAD, "grid_stride": _GRID_STRIDE, "float4": _FLOAT4}


def _unary_task(rng: random.Random, name: str, op: Unary) -> RenderedTask:
    rank = rng.choice((2, 3))
    shape = sizes(rng, rank, (1 << 14, 1 << 22), multiple=4 if name == "float4" else 1)
    style = sample_style(rng, op.stem)
    constants, shape_names = _shape_text(shape)
    reference = problem(
        init_params="", init_body="", forward_params="x", forward_body=f"return {op.torch}",
        constants=constants, inputs=_random(shape_names, op.positive), init_inputs="", functional=op.functional,
        what=f"the {op.stem.replace('_', ' ')} function, elementwise", imports=op.imports)
    cuda = style.fill(_UNARY_TEMPLATES[name], includes=style.includes(), kernel=style.kernel(), expr=op.cuda,
                      device=f"{op.stem}_op" if style.naming % 2 else f"apply_{op.stem}", what=op.stem,
                      inputs=style.inputs("x"))
    solution = solution_file(style, cuda=cuda, declaration=f"torch::Tensor {style.host}(torch::Tensor x);",
                             init_params="", init_body="", forward_params="x", call_args=style.arg("x"))
    return RenderedTask(reference, solution, f"{op.stem}-{size_class(shape)}")


def _register_unary(family: str, ops) -> None:
    for name in _UNARY_TEMPLATES:
        def make(rng: random.Random, name: str = name) -> RenderedTask:
            return _unary_task(rng, name, rng.choice(ops(rng)))
        template(family, name)(make)


_register_unary("unary", unaries)
_register_unary("activation", activations)


@dataclass(frozen=True)
class Binary:
    stem: str
    torch: str  # Python expression of a and b
    cuda: str  # CUDA expression of floats p and q
    positive_b: bool = False


def binaries(rng: random.Random) -> list[Binary]:
    return [
        Binary("add", rng.choice(("a + b", "torch.add(a, b)")), "p + q"),
        Binary("sub", rng.choice(("a - b", "torch.sub(a, b)")), "p - q"),
        Binary("mul", rng.choice(("a * b", "torch.mul(a, b)")), "p * q"),
        Binary("div", rng.choice(("a / b", "torch.div(a, b)")), "p / q", positive_b=True),
        Binary("maximum", "torch.maximum(a, b)", "fmaxf(p, q)"),
        Binary("minimum", "torch.minimum(a, b)", "fminf(p, q)"),
        Binary("squared_diff", "(a - b) * (a - b)", "(p - q) * (p - q)"),
    ]


# Broadcast patterns: b's shape from a's, and how the kernel finds b's element for output index i.
_SAME = """${includes}

// ${what} of two tensors of the same shape
__global__ void ${kernel}(const float*${ptr} a, const float*${ptr} b, float*${ptr} out, ${idx} n) {
    for (${idx} i = (${idx})blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (${idx})gridDim.x * blockDim.x) {
        float p = a[i];
        float q = b[i];
        out[i] = ${expr};
    }
}

torch::Tensor ${host}(torch::Tensor a, torch::Tensor b) {
${inputs}
    TORCH_CHECK(a.sizes() == b.sizes(), "a and b must have the same shape");
    auto out = torch::empty_like(a);
    ${idx} n = a.numel();
    int threads = ${block};
    int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 8192);
${stream}
    ${kernel}<<<blocks, threads, 0, stream>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
${checked}
    return out;
}
"""

_ROW = """${includes}

// ${what}: b holds one value per column (shape [cols]) and is reused by every row
__global__ void ${kernel}(const float*${ptr} a, const float*${ptr} b, float*${ptr} out, ${idx} n, ${idx} cols) {
    ${idx} i = (${idx})blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float p = a[i];
        float q = b[i % cols];
        out[i] = ${expr};
    }
}

torch::Tensor ${host}(torch::Tensor a, torch::Tensor b) {
${inputs}
    TORCH_CHECK(b.dim() == 1 && b.size(0) == a.size(-1), "b must have shape [a.size(-1)]");
    auto out = torch::empty_like(a);
    ${idx} n = a.numel();
    ${idx} cols = a.size(-1);
    const int threads = ${block};
    const int blocks = (int)((n + threads - 1) / threads);
${stream}
    ${kernel}<<<blocks, threads, 0, stream>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(),
                                              n, cols);
${checked}
    return out;
}
"""

_COLUMN = """${includes}

// ${what}: b holds one value per row (shape [..., 1]); blockIdx.y walks the rows
__global__ void ${kernel}(const float*${ptr} a, const float*${ptr} b, float*${ptr} out, int cols) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    ${idx} row = blockIdx.y;
    if (col < cols) {
        float p = a[row * cols + col];
        float q = b[row];
        out[row * cols + col] = ${expr};
    }
}

torch::Tensor ${host}(torch::Tensor a, torch::Tensor b) {
${inputs}
    TORCH_CHECK(b.numel() * a.size(-1) == a.numel() && b.size(-1) == 1, "b must have shape [..., 1]");
    auto out = torch::empty_like(a);
    int cols = (int)a.size(-1);
    int rows = (int)(a.numel() / cols);
    dim3 block(${block});
    dim3 grid((cols + ${block} - 1) / ${block}, rows);
${stream}
    ${kernel}<<<grid, block, 0, stream>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), cols);
${checked}
    return out;
}
"""

_STRIDED = """${includes}

// Up to four dims; broadcast dims of an input have stride 0.
struct ${layout} {
    long long size[4];
    long long stride_a[4];
    long long stride_b[4];
};

// ${what} with general broadcasting: each output index is split into coordinates
__global__ void ${kernel}(const float*${ptr} a, const float*${ptr} b, float*${ptr} out, ${layout} shape, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long rest = i, offset_a = 0, offset_b = 0;
    for (int d = 3; d >= 0; --d) {
        long long coord = rest % shape.size[d];
        rest /= shape.size[d];
        offset_a += coord * shape.stride_a[d];
        offset_b += coord * shape.stride_b[d];
    }
    float p = a[offset_a];
    float q = b[offset_b];
    out[i] = ${expr};
}

torch::Tensor ${host}(torch::Tensor a, torch::Tensor b) {
${inputs}
    auto sizes = at::infer_size(a.sizes(), b.sizes());
    TORCH_CHECK(sizes.size() <= 4, "at most 4 dims");
    auto out = torch::empty(sizes, a.options());
    auto a_view = a.expand(sizes);
    auto b_view = b.expand(sizes);
    ${layout} shape;
    int pad = 4 - (int)sizes.size();
    for (int d = 0; d < 4; ++d) {
        bool real = d >= pad;
        shape.size[d] = real ? sizes[d - pad] : 1;
        shape.stride_a[d] = real ? a_view.stride(d - pad) : 0;
        shape.stride_b[d] = real ? b_view.stride(d - pad) : 0;
    }
    long long n = out.numel();
    const int threads = ${block};
    const int blocks = (int)((n + threads - 1) / threads);
${stream}
    ${kernel}<<<blocks, threads, 0, stream>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(),
                                              shape, n);
${checked}
    return out;
}
"""


def _broadcast_shapes(rng: random.Random, name: str) -> tuple[list[int], list[int], str]:
    if name == "same_shape":
        shape = sizes(rng, rng.choice((2, 3)), (1 << 14, 1 << 22))
        return shape, list(shape), "same"
    if name == "row_broadcast":
        shape = sizes(rng, rng.choice((2, 3)), (1 << 14, 1 << 22))
        return shape, [shape[-1]], "row"
    if name == "column_broadcast":
        shape = sizes(rng, rng.choice((2, 3)), (1 << 14, 1 << 22))
        return shape, shape[:-1] + [1], "column"
    shape = sizes(rng, rng.choice((3, 4)), (1 << 14, 1 << 22))
    kind = rng.choice(("middle", "outer", "mixed"))
    if kind == "middle":
        other = [1] + shape[1:-1] + [1]
    elif kind == "outer":
        other = [1] * (len(shape) - 1) + [shape[-1]]
        other = [shape[0]] + [1] * (len(shape) - 1) if rng.random() < 0.5 else other
    else:
        other = [d if i % 2 else 1 for i, d in enumerate(shape)]
    return shape, other, kind


_BINARY_TEMPLATES = {"same_shape": _SAME, "row_broadcast": _ROW, "column_broadcast": _COLUMN, "strided": _STRIDED}


def _binary_task(rng: random.Random, name: str) -> RenderedTask:
    op = rng.choice(binaries(rng))
    shape, other, kind = _broadcast_shapes(rng, name)
    names = shape_names(shape)
    constants = "\n".join(f"{n} = {v}" for n, v in zip(names, shape))
    b_dims = ", ".join(n if d != 1 else "1" for n, d in zip(names[len(names) - len(other):], other))
    if name == "row_broadcast":
        b_dims = names[-1]
    b_input = f"torch.rand({b_dims}) + 0.5" if op.positive_b else f"torch.randn({b_dims})"
    reference = problem(
        init_params="", init_body="", forward_params="a, b", forward_body=f"return {op.torch}", constants=constants,
        inputs=f"torch.randn({', '.join(names)}), {b_input}", init_inputs="",
        what=f"an elementwise {op.stem.replace('_', ' ')} of two tensors" + (" with broadcasting" if kind != "same" else ""),
        grow=None if name == "column_broadcast" else "first")
    style = sample_style(rng, f"{op.stem}_{kind}" if kind != "same" else op.stem)
    cuda = style.fill(_BINARY_TEMPLATES[name], includes=style.includes(), kernel=style.kernel(), expr=op.cuda,
                      what=op.stem, inputs=style.inputs("a", "b"),
                      layout="Broadcast4" if style.naming % 2 else "broadcast_shape")
    solution = solution_file(style, cuda=cuda,
                             declaration=f"torch::Tensor {style.host}(torch::Tensor a, torch::Tensor b);",
                             init_params="", init_body="", forward_params="a, b",
                             call_args=f"{style.arg('a')}, {style.arg('b')}")
    return RenderedTask(reference, solution, f"{op.stem}-{kind}-rank{len(shape)}")


for _name in _BINARY_TEMPLATES:
    template("binary", _name)(lambda rng, name=_name: _binary_task(rng, name))
