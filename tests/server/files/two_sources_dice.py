# dice: reference = relu.py
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

helper_source = """
__global__ void scale_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
"""

relu_source = """
// TODO: write the ReLU kernel and its launcher
"""

helper = load_inline(name="helper", cpp_sources="", cuda_sources=helper_source, functions=[])
relu = load_inline(name="relu", cpp_sources="torch::Tensor relu(torch::Tensor x);", cuda_sources=relu_source,
                   functions=["relu"])


class ModelNew(nn.Module):
    def forward(self, x):
        return relu.relu(x)
