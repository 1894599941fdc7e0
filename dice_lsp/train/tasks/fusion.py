"""Fused elementwise tasks: an activation of a sum (add + relu and kin), and a per-column bias then activation; the
fused softmax and matmul tasks live beside their families (reduce.py, matmul.py) and register as "fusion" there.
"""

from __future__ import annotations

import random
import re

from dice_lsp.train.tasks.catalog import RenderedTask, shape_names, size_class, sizes, template
from dice_lsp.train.tasks.elementwise import activations
from dice_lsp.train.tasks.problem import problem
from dice_lsp.train.tasks.style import sample_style, solution_file

_ADD_ACT = """${includes}

__device__ __forceinline__ float ${act_fn}(float v) {
    return ${expr};
}

// ${what}: the sum and the activation in one pass, so the sum never goes back to memory
__global__ void ${kernel}(const float*${ptr} a, const float*${ptr} b, float*${ptr} out, ${idx} n) {
    ${idx} stride = (${idx})gridDim.x * blockDim.x;
    for (${idx} i = (${idx})blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = ${act_fn}(a[i] + b[i]);
    }
}

torch::Tensor ${host}(torch::Tensor a, torch::Tensor b) {
${inputs}
    TORCH_CHECK(a.sizes() == b.sizes(), "a and b must have the same shape");
    auto out = torch::empty_like(a);
    ${idx} n = a.numel();
    const int threads = ${block};
    int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 2048);
${stream}
    ${kernel}<<<blocks, threads, 0, stream>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
${checked}
    return out;
}
"""

_BIAS_ACT = """${includes}

__device__ __forceinline__ float ${act_fn}(float v) {
    return ${expr};
}

// ${what}: x + bias (one value per column of the last dim), then the activation, in one kernel
__global__ void ${kernel}(const float4*${ptr} x, const float4*${ptr} bias, float4*${ptr} y, ${idx} n4, int cols4) {
    ${idx} i = (${idx})blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {
        float4 v = x[i];
        float4 c = bias[i % cols4];
        v.x = ${act_fn}(v.x + c.x);
        v.y = ${act_fn}(v.y + c.y);
        v.z = ${act_fn}(v.z + c.z);
        v.w = ${act_fn}(v.w + c.w);
        y[i] = v;
    }
}

torch::Tensor ${host}(torch::Tensor x, torch::Tensor bias) {
${inputs}
    TORCH_CHECK(bias.numel() == x.size(-1), "bias must have one value per column");
    TORCH_CHECK(x.size(-1) % 4 == 0, "the last dim must be a multiple of 4 for float4 access");
    auto y = torch::empty_like(x);
    ${idx} n4 = x.numel() / 4;
    int cols4 = (int)(x.size(-1) / 4);
    const int threads = ${block};
    const int blocks = (int)((n4 + threads - 1) / threads);
${stream}
    ${kernel}<<<blocks, threads, 0, stream>>>(reinterpret_cast<const float4*>(x.data_ptr<float>()),
                                              reinterpret_cast<const float4*>(bias.data_ptr<float>()),
                                              reinterpret_cast<float4*>(y.data_ptr<float>()), n4, cols4);
${checked}
    return y;
}
"""


def _add_act(rng: random.Random) -> RenderedTask:
    act = rng.choice(activations(rng))
    shape = sizes(rng, rng.choice((2, 3)), (1 << 14, 1 << 22))
    names = shape_names(shape)
    stem = f"add_{act.stem}"
    style = sample_style(rng, stem)
    total = rng.choice(("a + b", "torch.add(a, b)"))
    summed = f"({total})" if "+" in total else total
    body = "return " + re.sub(r"\bx\b", summed, act.torch)
    reference = problem(
        init_params="", init_body="", forward_params="a, b", forward_body=body,
        constants="\n".join(f"{n} = {v}" for n, v in zip(names, shape)),
        inputs=f"torch.randn({', '.join(names)}), torch.randn({', '.join(names)})", init_inputs="",
        functional=act.functional, what=f"the sum of two tensors followed by {act.stem.replace('_', ' ')}",
        imports=act.imports)
    cuda = style.fill(_ADD_ACT, includes=style.includes(), kernel=style.kernel(), act_fn=f"{act.stem}_fn",
                      expr=act.cuda, what=f"add then {act.stem}", inputs=style.inputs("a", "b"))
    solution = solution_file(style, cuda=cuda, declaration=f"torch::Tensor {style.host}(torch::Tensor a, torch::Tensor b);",
                             init_params="", init_body="", forward_params="a, b",
                             call_args=f"{style.arg('a')}, {style.arg('b')}")
    return RenderedTask(reference, solution, f"{stem}-{size_class(shape)}")


def _bias_act(rng: random.Random) -> RenderedTask:
    act = rng.choice(activations(rng))
    shape = sizes(rng, rng.choice((2, 3)), (1 << 14, 1 << 22), multiple=4)
    names = shape_names(shape)
    stem = f"bias_{act.stem}"
    style = sample_style(rng, stem)
    init = "self.bias = nn.Parameter(torch.randn(dim) * 0.1)"
    body = "return " + re.sub(r"\bx\b", "x + self.bias", act.torch)
    reference = problem(
        init_params="dim: int", init_body=init, forward_params="x", forward_body=body,
        constants="\n".join(f"{n} = {v}" for n, v in zip(names, shape)),
        inputs=f"torch.randn({', '.join(names)})", init_inputs=names[-1], functional=act.functional,
        what=f"a learned bias added to each row, then {act.stem.replace('_', ' ')}", imports=act.imports)
    cuda = style.fill(_BIAS_ACT, includes=style.includes(), kernel=style.kernel(), act_fn=f"{act.stem}_fn",
                      expr=act.cuda, what=f"bias then {act.stem}", inputs=style.inputs("x", "bias"))
    solution = solution_file(style, cuda=cuda,
                             declaration=f"torch::Tensor {style.host}(torch::Tensor x, torch::Tensor bias);",
                             init_params="dim: int", init_body=init, forward_params="x",
                             call_args=f"{style.arg('x')}, self.bias")
    return RenderedTask(reference, solution, f"{stem}-{size_class(shape)}")


template("fusion", "add_act")(_add_act)
template("fusion", "bias_act_float4")(_bias_act)
