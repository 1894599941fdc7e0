import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# One C++-only extension for every solution of the eval tests, so the whole suite builds it once.
host_source = """
#include <torch/extension.h>

torch::Tensor add_values(torch::Tensor a, torch::Tensor b) {
    auto x = a.contiguous();
    auto y = b.contiguous();
    auto out = torch::empty_like(x);
    const float* p = x.data_ptr<float>();
    const float* q = y.data_ptr<float>();
    float* r = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) r[i] = p[i] + q[i];
    return out;
}

torch::Tensor zeros_of(torch::Tensor a, torch::Tensor b) {
    return torch::zeros_like(a);
}
"""

eval_fixture = load_inline(
    name="eval_fixture",
    cpp_sources=host_source,
    functions=["add_values", "zeros_of"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = eval_fixture

    def forward(self, a, b):
        FORWARD
