import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void add_kernel(const float* a, const float* b, float* out, int size) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < size) {
        out[i] = a[i] + b[i];
    }
}

__global__ void unused_kernel(float* out, int size) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < size) out[i] = 0.0f;
}

torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    int size = a.numel();
    const int block = 256;
    add_kernel<<<(size + block - 1) / block, block>>>(a.data_ptr<float>(), b.data_ptr<float>(),
                                                     out.data_ptr<float>(), size);
    return out;
}
"""

cpp_source = "torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b);"

add_extension = load_inline(
    name="harness_cuda_add",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["add_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.add = add_extension

    def forward(self, a, b):
        return self.add.add_cuda(a, b)
