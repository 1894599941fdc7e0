# dice: reference = row_soft_threshold.py
"""A solution of row_soft_threshold.py in C++ only (no CUDA), so it builds and runs on any machine with a C++
compiler: one pass over each row, reading its threshold once."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = """
#include <torch/extension.h>
#include <cmath>

torch::Tensor row_soft_threshold(torch::Tensor x, torch::Tensor threshold) {
    TORCH_CHECK(x.dim() == 2 && threshold.dim() == 2, "x is (rows, cols) and threshold (rows, 1)");
    TORCH_CHECK(threshold.size(0) == x.size(0) && threshold.size(1) == 1, "one threshold per row of x");
    TORCH_CHECK(x.scalar_type() == torch::kFloat && threshold.scalar_type() == torch::kFloat, "float32 only");
    TORCH_CHECK(x.device().is_cpu() && threshold.device().is_cpu(), "CPU tensors only");
    auto values = x.contiguous();
    auto limits = threshold.contiguous();
    auto out = torch::empty_like(values);
    const int64_t rows = values.size(0), cols = values.size(1);
    const float* in = values.data_ptr<float>();
    const float* t = limits.data_ptr<float>();
    float* result = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        const float limit = t[r];
        const float* row = in + r * cols;
        float* row_out = result + r * cols;
        for (int64_t c = 0; c < cols; ++c) {
            const float shrunk = std::fabs(row[c]) - limit;
            row_out[c] = shrunk > 0.0f ? std::copysign(shrunk, row[c]) : 0.0f;
        }
    }
    return out;
}
"""

soft_threshold = load_inline(
    name="example_row_soft_threshold",
    cpp_sources=cpp_source,
    functions=["row_soft_threshold"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = soft_threshold

    def forward(self, x: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
        return self.ext.row_soft_threshold(x, threshold)
