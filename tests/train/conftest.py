"""Fixtures of the training tests: a tiny random checkpoint and a toy set of KernelBench pairs."""

from __future__ import annotations

import json

import pytest

OPS = {"add": "a + b", "mul": "a * b", "sub": "a - b", "max": "fmaxf(a, b)"}

REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return {torch_expr}


def get_inputs():
    return [torch.randn(64), torch.randn(64)]


def get_init_inputs():
    return []
'''

SOLUTION = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

{name}_source = """
#include <torch/extension.h>

__global__ void {name}_kernel(const float* a, const float* b, float* out, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{ float x = a[i], y = b[i]; out[i] = {cuda_expr}; }}
}}

torch::Tensor {name}_cuda(torch::Tensor a, torch::Tensor b) {{
    auto out = torch::empty_like(a);
    int n = a.numel();
    {name}_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}}
"""

{name}_cpp_source = "torch::Tensor {name}_cuda(torch::Tensor a, torch::Tensor b);"

{name} = load_inline(
    name="{name}",
    cpp_sources={name}_cpp_source,
    cuda_sources={name}_source,
    functions=["{name}_cuda"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.op = {name}

    def forward(self, a, b):
        return self.op.{name}_cuda(a, b)
'''


def toy_pairs() -> list[dict]:
    pairs = []
    for level, (name, expr) in enumerate(OPS.items()):
        torch_expr = expr if "fmaxf" not in expr else "torch.maximum(a, b)"
        cuda_expr = expr.replace("a", "x").replace("b", "y").replace("fmxxf", "fmaxf")
        pairs.append({"reference": REFERENCE.format(torch_expr=torch_expr),
                      "solution": SOLUTION.format(name=f"elementwise_{name}", cuda_expr=cuda_expr),
                      "level": 1 + level % 2})
    return pairs


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    from engine.tiny import build

    return build(tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture(scope="session")
def toy_jsonl(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "pairs.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in toy_pairs()))
    return path
