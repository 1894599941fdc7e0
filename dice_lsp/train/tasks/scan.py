"""Scan tasks along a dimension: cumulative sum and product, reversed, exclusive, and masked (a cumulative sum of
the elements a boolean mask keeps).

Templates: one thread per line along any dim (sequential, [outer, r, inner]) and one warp per row of the last dim
(32-wide shuffle scans carried from chunk to chunk).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from dice_lsp.train.tasks.catalog import RenderedTask, sizes, template
from dice_lsp.train.tasks.problem import problem
from dice_lsp.train.tasks.reduce import GEOMETRY
from dice_lsp.train.tasks.style import sample_style, solution_file


@dataclass(frozen=True)
class Scan:
    stem: str
    torch: str  # Python expression of x (and mask), `{dim}` for the dim
    identity: str
    combine: str  # CUDA expression of floats a (the running value) and b
    output: str  # CUDA expression of the running value `acc` and the element `v`
    reverse: bool = False
    masked: bool = False


def scans(rng: random.Random) -> list[Scan]:
    exclusive = rng.choice(("torch.cumsum(x, dim={dim}) - x",
                            "torch.cat([torch.zeros_like(x.narrow({dim}, 0, 1)), "
                            "x.narrow({dim}, 0, x.size({dim}) - 1)], dim={dim}).cumsum({dim})"))
    return [
        Scan("cumsum", rng.choice(("torch.cumsum(x, dim={dim})", "x.cumsum({dim})")), "0.0f", "a + b", "acc"),
        Scan("cumprod", rng.choice(("torch.cumprod(x, dim={dim})", "x.cumprod(dim={dim})")), "1.0f", "a * b", "acc"),
        Scan("reverse_cumsum", rng.choice(("torch.cumsum(x.flip({dim}), dim={dim}).flip({dim})",
                                           "x.flip({dim}).cumsum({dim}).flip({dim})")), "0.0f", "a + b", "acc",
             reverse=True),
        Scan("exclusive_cumsum", exclusive, "0.0f", "a + b", "acc - v"),
        Scan("masked_cumsum", "torch.cumsum(x * mask, dim={dim})", "0.0f", "a + b", "acc", masked=True),
    ]


_LINE = """${includes}

// ${what} along any dim: the input is [outer, r, inner] and each thread walks one line of r elements
__global__ void ${kernel}(const float*${ptr} x, ${mask_param}float*${ptr} y, int64_t outer, int64_t r, int64_t inner) {
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= outer * inner) return;
    const int64_t base = (t / inner) * r * inner + t % inner;
    float acc = ${identity};
    for (int64_t step = 0; step < r; ++step) {
        const int64_t at = base + (${reverse} ? r - 1 - step : step) * inner;
        const float v = ${load};
        const float a = acc, b = v;
        acc = ${combine};
        y[at] = ${output};
    }
}

torch::Tensor ${host}(torch::Tensor x, ${mask_arg}int64_t dim) {
${inputs}
${geometry}
    auto y = torch::empty_like(x);
    const int threads = ${block};
    const int blocks = (int)((outer * inner + threads - 1) / threads);
${stream}
    ${kernel}<<<blocks, threads, 0, stream>>>(x.data_ptr<float>(), ${mask_ptr}y.data_ptr<float>(), outer, r, inner);
${checked}
    return y;
}
"""

_WARP = """${includes}

// ${what} along the last dim: one warp per row, 32 elements at a time; a shuffle scan inside the chunk and the
// chunk's last value carried into the next
__global__ void ${kernel}(const float*${ptr} x, ${mask_param}float*${ptr} y, int64_t rows, int64_t r) {
    const int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const int64_t base = row * r;
    float carry = ${identity};
    for (int64_t start = 0; start < r; start += 32) {
        const int64_t step = start + lane;
        const int64_t at = base + (${reverse} ? r - 1 - step : step);
        const float v = step < r ? ${load} : ${identity};
        float acc = v;
        for (int offset = 1; offset < 32; offset <<= 1) {
            const float a = __shfl_up_sync(0xffffffff, acc, offset), b = acc;
            if (lane >= offset) acc = ${combine};
        }
        {
            const float a = carry, b = acc;
            acc = ${combine};
        }
        if (step < r) y[at] = ${output};
        carry = __shfl_sync(0xffffffff, acc, 31);
    }
}

torch::Tensor ${host}(torch::Tensor x, ${mask_arg}int64_t dim) {
${inputs}
${geometry}
    TORCH_CHECK(inner == 1, "this kernel scans the last dim only");
    auto y = torch::empty_like(x);
    const int threads = ${block};
    const int64_t blocks = (outer * 32 + threads - 1) / threads;
${stream}
    ${kernel}<<<(unsigned)blocks, threads, 0, stream>>>(x.data_ptr<float>(), ${mask_ptr}y.data_ptr<float>(), outer, r);
${checked}
    return y;
}
"""

_MASK_CHECK = """    TORCH_CHECK(mask.is_cuda() && mask.is_contiguous(), "mask must be a contiguous CUDA tensor");
    TORCH_CHECK(mask.scalar_type() == torch::kBool && mask.sizes() == x.sizes(), "mask must be bool, shaped as x");"""

_TEMPLATES = {"thread_per_line": _LINE, "warp_row": _WARP}


def _scan_task(rng: random.Random, name: str) -> RenderedTask:
    op = rng.choice(scans(rng))
    rank = rng.choice((2, 3))
    shape = sizes(rng, rank, (1 << 12, 1 << 21))
    last = name == "warp_row" or rng.random() < 0.5
    dim = rank - 1 if last else rng.randrange(rank - 1)
    dim_text = str(rng.choice((-1, rank - 1)) if last else dim)
    names = ["batch_size", "length"] if rank == 2 else ["batch_size", "channels", "length"]
    shape_text = ", ".join(names)
    inputs = f"torch.randn({shape_text})" + (f", torch.randint(0, 2, ({shape_text},)).bool()" if op.masked else "")
    reference = problem(
        init_params="dim: int", init_body="self.dim = dim", forward_params="x, mask" if op.masked else "x",
        forward_body="return " + op.torch.format(dim="self.dim"),
        constants="\n".join(f"{n} = {v}" for n, v in zip(names, shape)) + f"\ndim = {dim_text}",
        inputs=inputs, init_inputs="dim", what=f"a {op.stem.replace('_', ' ')} along one dimension",
        renames=not op.masked, grow=None if not last else "first")
    style = sample_style(rng, op.stem)
    cuda = style.fill(_TEMPLATES[name], includes=style.includes(), kernel=style.kernel(), what=op.stem,
                      identity=op.identity, combine=op.combine, output=op.output,
                      reverse="true" if op.reverse else "false",
                      load="(mask[at] ? x[at] : 0.0f)" if op.masked else "x[at]",
                      mask_param=f"const bool*{style.ptr} mask, " if op.masked else "",
                      mask_arg="torch::Tensor mask, " if op.masked else "",
                      mask_ptr="mask.data_ptr<bool>(), " if op.masked else "",
                      inputs=style.inputs("x") + ("\n" + _MASK_CHECK if op.masked else ""), geometry=GEOMETRY)
    declaration = f"torch::Tensor {style.host}(torch::Tensor x, {'torch::Tensor mask, ' if op.masked else ''}int64_t dim);"
    call = [style.arg("x")] + (["mask"] if op.masked else []) + ["self.dim"]
    solution = solution_file(style, cuda=cuda, declaration=declaration, init_params="dim: int",
                             init_body="self.dim = dim", forward_params="x, mask" if op.masked else "x",
                             call_args=", ".join(call))
    where = "last" if last else f"dim{dim}"
    return RenderedTask(reference, solution, f"{op.stem}-rank{rank}-{where}")


for _name in _TEMPLATES:
    template("scan", _name)(lambda rng, name=_name: _scan_task(rng, name))
