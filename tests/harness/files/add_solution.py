import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = """
#include <torch/extension.h>
#include <map>

torch::Tensor add_values(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    const float* x = a.data_ptr<float>();
    const float* y = b.data_ptr<float>();
    float* z = out.data_ptr<float>();
    for (int64_t i = 0; i < a.numel(); ++i) z[i] = x[i] + y[i];
    return out;
}

torch::Tensor subtract(torch::Tensor a, torch::Tensor b) {
    return add_values(a, -b);
}

torch::Tensor zeros(torch::Tensor a, torch::Tensor b) {
    return torch::zeros_like(a);
}

torch::Tensor add_cached(torch::Tensor a, torch::Tensor b) {
    static std::map<const void*, torch::Tensor> cache;
    auto hit = cache.find(a.data_ptr());
    if (hit != cache.end()) return hit->second;
    auto out = add_values(a, b);
    cache[a.data_ptr()] = out;
    return out;
}

torch::Tensor segfault(torch::Tensor a, torch::Tensor b) {
    volatile int* nowhere = nullptr;
    *nowhere = 1;
    return a;
}

torch::Tensor spin(torch::Tensor a, torch::Tensor b) {
    volatile bool forever = true;
    while (forever) {}
    return a;
}
"""

harness_fixture = load_inline(
    name="harness_fixture",
    cpp_sources=cpp_source,
    functions=["add_values", "subtract", "zeros", "add_cached", "segfault", "spin"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = harness_fixture

    def forward(self, a, b):
        return self.ext.FUNCTION(a, b)
