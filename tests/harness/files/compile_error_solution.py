import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = """
#include <torch/extension.h>

torch::Tensor broken_add(torch::Tensor a, torch::Tensor b) {
    auto out = a + b;
    return undeclared_name;
}
"""

broken = load_inline(name="harness_broken", cpp_sources=cpp_source, functions=["broken_add"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return broken.broken_add(a, b)
