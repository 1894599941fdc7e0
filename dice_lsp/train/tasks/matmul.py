"""Matmul tasks with fused epilogues: C = A @ B (two inputs, nn.Linear's weight, or an explicit parameter), then
bias, scale and an activation in the reference's order, all applied before the one store of C.

Templates: one thread per output element, and shared-memory tiles (16 or 32 wide) with bounds checks.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from dice_lsp.train.tasks.catalog import RenderedTask, template
from dice_lsp.train.tasks.elementwise import Unary, activations
from dice_lsp.train.tasks.problem import problem
from dice_lsp.train.tasks.style import Style, sample_style, solution_file

_NAIVE = """${includes}

${act_fn}// C[row, col] = epilogue(sum_k A[row, k] * B(k, col)), one thread per output element
__global__ void ${kernel}(const float*${ptr} A, const float*${ptr} B, ${params}float*${ptr} C, int M, int N, int K${scale_param}) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            acc += A[(${idx})row * K + k] * ${b_at};
        }
${epilogue}
        C[(${idx})row * N + col] = acc;
    }
}

torch::Tensor ${host}(${signature}) {
${inputs}
${dims}
    auto c = torch::empty({M, N}, ${a}.options());
    dim3 block(16, 16);
    dim3 grid((N + 15) / 16, (M + 15) / 16);
${stream}
    ${kernel}<<<grid, block, 0, stream>>>(${a}.data_ptr<float>(), ${b}.data_ptr<float>(), ${pointers}c.data_ptr<float>(),
                                          M, N, K${scale_arg});
${checked}
    return c;
}
"""

_TILED = """${includes}

#define ${tile} ${tile_size}

${act_fn}// C = epilogue(A @ B) through ${tile_size}x${tile_size} tiles of A and B staged in shared memory
__global__ void ${kernel}(const float*${ptr} A, const float*${ptr} B, ${params}float*${ptr} C, int M, int N, int K${scale_param}) {
    __shared__ float a_tile[${tile}][${tile}];
    __shared__ float b_tile[${tile}][${tile} + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * ${tile} + ty;
    int col = blockIdx.x * ${tile} + tx;
    float acc = 0.0f;
    for (int t = 0; t < K; t += ${tile}) {
        int ka = t + tx;
        int k = t + ty;
        // zero-fill past the edges so partial tiles add nothing
        a_tile[ty][tx] = (row < M && ka < K) ? A[(${idx})row * K + ka] : 0.0f;
        b_tile[ty][tx] = (k < K && col < N) ? ${b_at} : 0.0f;
        __syncthreads();
        for (int j = 0; j < ${tile}; ++j) {
            acc += a_tile[ty][j] * b_tile[j][tx];
        }
        __syncthreads();
    }
    if (row < M && col < N) {
${epilogue}
        C[(${idx})row * N + col] = acc;
    }
}

torch::Tensor ${host}(${signature}) {
${inputs}
${dims}
    auto c = torch::empty({M, N}, ${a}.options());
    dim3 block(${tile}, ${tile});
    dim3 grid((N + ${tile} - 1) / ${tile}, (M + ${tile} - 1) / ${tile});
${stream}
    ${kernel}<<<grid, block, 0, stream>>>(${a}.data_ptr<float>(), ${b}.data_ptr<float>(), ${pointers}c.data_ptr<float>(),
                                          M, N, K${scale_arg});
${checked}
    return c;
}
"""

_TEMPLATES = {"naive": _NAIVE, "tiled": _TILED}


def _dims(rng: random.Random) -> tuple[int, int, int]:
    while True:
        m = rng.choice((64, 100, 128, 256, 500, 512, 1024))
        k = rng.choice((64, 128, 250, 256, 384, 512, 1000, 1024))
        n = rng.choice((64, 128, 200, 256, 512, 1000, 1024))
        if m * n * k <= 1 << 28:
            return m, k, n


@dataclass(frozen=True)
class _Matmul:
    """One matmul task's draws: where B comes from, the sizes, and the epilogue in the reference's order."""

    source: str  # "inputs" (a @ b), "linear" (nn.Linear's weight, [N, K]) or "parameter" (an explicit [K, N])
    m: int
    k: int
    n: int
    has_bias: bool
    steps: tuple[str, ...]  # "scale" and "act", in the order the reference applies them
    act: Unary  # one of the elementwise activations
    scale: float

    @property
    def scale_param(self) -> bool:  # the scale is a constructor argument, not a literal
        return "scale" in self.steps and self.source != "inputs"

    @property
    def init_params(self) -> str:
        named = "" if self.source == "inputs" else "in_features: int, out_features: int"
        return named + (", scale: float" if self.scale_param else "")


def _matmul_task(rng: random.Random, name: str, family: str) -> RenderedTask:
    source = rng.choice(("inputs", "linear", "parameter"))
    m, k, n = _dims(rng)
    has_bias = source != "inputs" and (family == "fusion" or rng.random() < 0.6)
    steps = ["scale", "act"] if rng.random() < 0.5 else ["act", "scale"]
    steps = [s for s in steps if family == "fusion" or rng.random() < 0.5]
    if family == "fusion" and "act" not in steps:
        steps.append("act")
    act = rng.choice(activations(rng)[:8])
    task = _Matmul(source, m, k, n, has_bias, tuple(steps), act, rng.choice((0.5, 2.0, 0.125, 1.5)))
    stem = "matmul" if not steps and not has_bias else "_".join(["matmul"] + (["bias"] if has_bias else [])
                                                                + [act.stem if s == "act" else s for s in steps])
    style = sample_style(rng, stem)
    reference, mine, epilogue = _matmul_reference(rng, task)
    solution = _matmul_solution(rng, task, name, style, mine, epilogue)
    size = "small" if m * n * k < 1 << 24 else "large"
    shape_class = f"{source}-{'bias-' if has_bias else ''}{'-'.join(steps) or 'plain'}-{size}"
    return RenderedTask(reference, solution, shape_class)


def _matmul_reference(rng: random.Random, task: _Matmul) -> tuple[str, list[str], list[str]]:
    """(the reference file, ModelNew's constructor lines, the CUDA epilogue's lines): the reference one line per
    step, and ModelNew's parameters created in the same order."""
    source, act = task.source, task.act
    init, mine = [], []
    if source == "linear":
        init.append(f"self.linear = nn.Linear(in_features, out_features, bias={task.has_bias})")
        mine.append(init[-1])
        first = "y = self.linear(x)"
    elif source == "parameter":
        init.append("self.weight = nn.Parameter(torch.randn(in_features, out_features) * 0.05)")
        if task.has_bias:
            init.append("self.bias = nn.Parameter(torch.randn(out_features) * 0.1)")
        mine = list(init)
        first = "y = torch.matmul(x, self.weight)" if rng.random() < 0.5 else "y = x @ self.weight"
    else:
        first = rng.choice(("y = torch.matmul(a, b)", "y = a @ b", "y = torch.mm(a, b)"))
    if task.scale_param:
        init.append("self.scale = scale")
        mine.append("self.scale = scale")
    lines = [first]
    if task.has_bias and source == "parameter":
        lines.append("y = y + self.bias")
    epilogue = ["        acc += bias[col];"] if task.has_bias else []
    for step in task.steps:
        if step == "scale":
            lines.append(f"y = y * {'self.scale' if task.scale_param else task.scale}")
            epilogue.append("        acc *= scale;" if task.scale_param else f"        acc *= {task.scale}f;")
        else:
            lines.append("y = " + re.sub(r"\bx\b", "y", act.torch))
            epilogue.append(f"        acc = {act.stem}_act(acc);")
    constants = f"M = {task.m}\nK = {task.k}\nN = {task.n}" if source == "inputs" else \
        f"batch_size = {task.m}\nin_features = {task.k}\nout_features = {task.n}" + \
        (f"\nscale = {task.scale}" if task.scale_param else "")
    reference = problem(
        init_params=task.init_params, init_body="\n".join(init), forward_params=_forward_params(task),
        forward_body="\n".join(lines + ["return y"]), constants=constants,
        inputs="torch.randn(M, K), torch.randn(K, N)" if source == "inputs" else "torch.randn(batch_size, in_features)",
        init_inputs="" if source == "inputs" else "in_features, out_features" + (", scale" if task.scale_param else ""),
        functional=act.functional and "act" in task.steps, imports=act.imports if "act" in task.steps else (),
        what="a matrix multiplication" + (" with a fused epilogue" if task.steps or task.has_bias else ""),
        max_gb=1.0, limit=1_000_000)  # grid.y of the 16-row tiles
    return reference, mine, epilogue


def _forward_params(task: _Matmul) -> str:
    return "a, b" if task.source == "inputs" else "x"


def _matmul_solution(rng: random.Random, task: _Matmul, name: str, style: Style, mine: list[str],
                     epilogue: list[str]) -> str:
    """The solution file: B is [K, N] except nn.Linear's weight, [N, K]."""
    source, has_bias, scale_param = task.source, task.has_bias, task.scale_param
    a, b = ("a", "b") if source == "inputs" else ("x", "weight")
    b_at = "B[(${idx})col * K + k]" if source == "linear" else "B[(${idx})k * N + col]"
    tensors = [a, b] + (["bias"] if has_bias else [])
    signature = ", ".join(f"torch::Tensor {t}" for t in tensors) + (", double scale" if scale_param else "")
    dims = (f"    int M = (int){a}.size(0), K = (int){a}.size(1);\n"
            + (f"    int N = (int){b}.size(0);\n    TORCH_CHECK({b}.size(1) == K, \"weight must be [N, K]\");"
               if source == "linear" else
               f"    int N = (int){b}.size(1);\n    TORCH_CHECK({b}.size(0) == K, \"inner dims must match\");"))
    act_fn = (f"__device__ __forceinline__ float {task.act.stem}_act(float v) {{\n    return {task.act.cuda};\n}}\n\n"
              if "act" in task.steps else "")
    text = _TEMPLATES[name].replace("${b_at}", b_at)
    if not epilogue:
        text = text.replace("${epilogue}\n", "")
    cuda = style.fill(text, includes=style.includes(), kernel=style.kernel(),
                      act_fn=act_fn, params="const float* bias, " if has_bias else "",
                      scale_param=", float scale" if scale_param else "",
                      scale_arg=", (float)scale" if scale_param else "", epilogue="\n".join(epilogue),
                      signature=signature, inputs=style.inputs(*tensors), dims=dims, a=a, b=b,
                      pointers="bias.data_ptr<float>(), " if has_bias else "",
                      tile="TILE" if style.naming % 2 else "TILE_DIM", tile_size=rng.choice((16, 32)))
    if source == "linear":
        call = [style.arg("x"), "self.linear.weight"] + (["self.linear.bias"] if has_bias else [])
    elif source == "parameter":
        call = [style.arg("x"), "self.weight"] + (["self.bias"] if has_bias else [])
    else:
        call = [style.arg("a"), style.arg("b")]
    if scale_param:
        call.append("self.scale")
    return solution_file(style, cuda=cuda, declaration=f"torch::Tensor {style.host}({signature});",
                         init_params=task.init_params, init_body="\n".join(mine), forward_params=_forward_params(task),
                         call_args=", ".join(call))


for _name in _TEMPLATES:
    template("matmul", _name)(lambda rng, name=_name: _matmul_task(rng, name, "matmul"))
template("fusion", "linear_act_tiled")(lambda rng: _matmul_task(rng, "tiled", "fusion"))
