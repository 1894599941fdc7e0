"""Matmul tasks with fused epilogues: C = A @ B (two inputs, nn.Linear's weight, or an explicit parameter), then
bias, scale and an activation in the reference's order, all applied before the one store of C.

Templates: one thread per output element, and shared-memory tiles (16 or 32 wide) with bounds checks.
"""

from __future__ import annotations

import random
import re

from dice_lsp.train.tasks.catalog import RenderedTask, template
from dice_lsp.train.tasks.elementwise import activations
from dice_lsp.train.tasks.problem import problem
from dice_lsp.train.tasks.style import sample_style, solution_file

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


def _matmul_task(rng: random.Random, name: str, family: str) -> RenderedTask:
    source = rng.choice(("inputs", "linear", "parameter"))
    m, k, n = _dims(rng)
    has_bias = source != "inputs" and (family == "fusion" or rng.random() < 0.6)
    steps = ["scale", "act"] if rng.random() < 0.5 else ["act", "scale"]
    steps = [s for s in steps if family == "fusion" or rng.random() < 0.5]
    if family == "fusion" and "act" not in steps:
        steps.append("act")
    act = rng.choice(activations(rng)[:8])
    scale = rng.choice((0.5, 2.0, 0.125, 1.5))
    stem = "matmul" if not steps and not has_bias else "_".join(["matmul"] + (["bias"] if has_bias else [])
                                                                + [act.stem if s == "act" else s for s in steps])
    style = sample_style(rng, stem)
    # The reference, one line per step, and ModelNew's parameters created in the same order.
    scale_param = "scale" in steps and source != "inputs"
    init_params = {"inputs": "", "linear": "in_features: int, out_features: int",
                   "parameter": "in_features: int, out_features: int"}[source]
    if scale_param:
        init_params += ", scale: float"
    init, mine = [], []
    if source == "linear":
        init.append(f"self.linear = nn.Linear(in_features, out_features, bias={has_bias})")
        mine.append(init[-1])
        first = "y = self.linear(x)"
    elif source == "parameter":
        init.append("self.weight = nn.Parameter(torch.randn(in_features, out_features) * 0.05)")
        if has_bias:
            init.append("self.bias = nn.Parameter(torch.randn(out_features) * 0.1)")
        mine = list(init)
        first = "y = torch.matmul(x, self.weight)" if rng.random() < 0.5 else "y = x @ self.weight"
    else:
        first = rng.choice(("y = torch.matmul(a, b)", "y = a @ b", "y = torch.mm(a, b)"))
    if scale_param:
        init.append("self.scale = scale")
        mine.append("self.scale = scale")
    lines = [first]
    if has_bias and source == "parameter":
        lines.append("y = y + self.bias")
    epilogue = ["        acc += bias[col];"] if has_bias else []
    for step in steps:
        if step == "scale":
            lines.append(f"y = y * {'self.scale' if scale_param else scale}")
            epilogue.append("        acc *= scale;" if scale_param else f"        acc *= {scale}f;")
        else:
            lines.append("y = " + re.sub(r"\bx\b", "y", act.torch))
            epilogue.append(f"        acc = {act.stem}_act(acc);")
    forward_params = "a, b" if source == "inputs" else "x"
    constants = f"M = {m}\nK = {k}\nN = {n}" if source == "inputs" else \
        f"batch_size = {m}\nin_features = {k}\nout_features = {n}" + (f"\nscale = {scale}" if scale_param else "")
    reference = problem(
        init_params=init_params, init_body="\n".join(init), forward_params=forward_params,
        forward_body="\n".join(lines + ["return y"]), constants=constants,
        inputs="torch.randn(M, K), torch.randn(K, N)" if source == "inputs" else "torch.randn(batch_size, in_features)",
        init_inputs="" if source == "inputs" else "in_features, out_features" + (", scale" if scale_param else ""),
        functional=act.functional and "act" in steps, imports=act.imports if "act" in steps else (),
        what="a matrix multiplication" + (" with a fused epilogue" if steps or has_bias else ""), max_gb=1.0,
        limit=1_000_000)  # grid.y of the 16-row tiles
    # The solution: B is [K, N] except nn.Linear's weight, [N, K].
    a, b = ("a", "b") if source == "inputs" else ("x", "weight")
    b_at = "B[(${idx})col * K + k]" if source == "linear" else "B[(${idx})k * N + col]"
    tensors = [a, b] + (["bias"] if has_bias else [])
    signature = ", ".join(f"torch::Tensor {t}" for t in tensors) + (", double scale" if scale_param else "")
    dims = (f"    int M = (int){a}.size(0), K = (int){a}.size(1);\n"
            + (f"    int N = (int){b}.size(0);\n    TORCH_CHECK({b}.size(1) == K, \"weight must be [N, K]\");"
               if source == "linear" else
               f"    int N = (int){b}.size(1);\n    TORCH_CHECK({b}.size(0) == K, \"inner dims must match\");"))
    act_fn = (f"__device__ __forceinline__ float {act.stem}_act(float v) {{\n    return {act.cuda};\n}}\n\n"
              if "act" in steps else "")
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
    solution = solution_file(style, cuda=cuda, declaration=f"torch::Tensor {style.host}({signature});",
                             init_params=init_params, init_body="\n".join(mine), forward_params=forward_params,
                             call_args=", ".join(call))
    size = "small" if m * n * k < 1 << 24 else "large"
    shape_class = f"{source}-{'bias-' if has_bias else ''}{'-'.join(steps) or 'plain'}-{size}"
    return RenderedTask(reference, solution, shape_class)


for _name in _TEMPLATES:
    template("matmul", _name)(lambda rng, name=_name: _matmul_task(rng, name, "matmul"))
template("fusion", "linear_act_tiled")(lambda rng: _matmul_task(rng, "tiled", "fusion"))
