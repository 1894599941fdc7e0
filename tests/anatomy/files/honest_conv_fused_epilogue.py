import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

bias_relu_source = """
__global__ void bias_relu_kernel(float* x, const float* bias, int channels, int hw, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i] + bias[(i / hw) % channels];
        x[i] = v > 0.f ? v : 0.f;
    }
}
torch::Tensor bias_relu_cuda(torch::Tensor x, torch::Tensor bias) {
    int n = x.numel();
    bias_relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), bias.data_ptr<float>(), x.size(1),
                                               x.size(2) * x.size(3), n);
    return x;
}
"""

fused = load_inline(
    name="bias_relu",
    cpp_sources="torch::Tensor bias_relu_cuda(torch::Tensor x, torch::Tensor bias);",
    cuda_sources=bias_relu_source,
    functions=["bias_relu_cuda"],
)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, bias=False)
        self.bias = nn.Parameter(torch.randn(out_channels))
        self.fused = fused

    def forward(self, x):
        x = self.conv(x)
        return self.fused.bias_relu_cuda(x, self.bias)


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, bias=False)
        self.bias = nn.Parameter(torch.randn(out_channels))

    def forward(self, x):
        return torch.relu(self.conv(x) + self.bias.view(1, -1, 1, 1))


def get_inputs():
    return [torch.randn(8, 3, 32, 32)]


def get_init_inputs():
    return [3, 16, 3]
