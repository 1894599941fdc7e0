# -*- coding: utf-8 -*-
# Ünïcödé comment: matrice × matrice — 行列積 😀
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

HELPERS = r"""
__device__ __forceinline__ float fma_acc(float acc, float a, float b) {
    return acc + a * b;  // raw string: \n stays two characters
}
"""

tiled_matmul_source = HELPERS + '''
#define TILE 16

template <int T>
__global__ void tiled_matmul_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                    float* __restrict__ C, int M, int N, int K) {
    __shared__ float As[T][T];
    __shared__ float Bs[T][T];
    int row = blockIdx.y * T + threadIdx.y;
    int col = blockIdx.x * T + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < (K + T - 1) / T; ++t) {
        As[threadIdx.y][threadIdx.x] = (row < M && t * T + threadIdx.x < K) ? A[row * K + t * T + threadIdx.x] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (col < N && t * T + threadIdx.y < K) ? B[(t * T + threadIdx.y) * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < T; ++k) acc = fma_acc(acc, As[threadIdx.y][k], Bs[k][threadIdx.x]);
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

torch::Tensor tiled_matmul_cuda(torch::Tensor A, torch::Tensor B) {
    const int M = A.size(0), K = A.size(1), N = B.size(1);
    auto C = torch::empty({M, N}, A.options());
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    tiled_matmul_kernel<TILE><<<grid, block>>>(A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), M, N, K);
    return C;
}
'''

scale_source = "__global__ void scale_kernel(float* x, float s, int n) {\n" \
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n" \
    "    if (i < n) x[i] *= s;\t// escaped tab\n" \
    "}\n" \
    "void scale_inplace_cuda(torch::Tensor x, double s) {\n" \
    "    int n = x.numel();\n" \
    "    scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), (float)s, n);\n" \
    "}\n"

cpp_decls = [
    "torch::Tensor tiled_matmul_cuda(torch::Tensor A, torch::Tensor B);",
    "void scale_inplace_cuda(torch::Tensor x, double s);",
]

matmul_ext = load_inline(
    name="tiled_matmul",
    cpp_sources=cpp_decls,
    cuda_sources=[tiled_matmul_source, scale_source],
    functions=["tiled_matmul_cuda", "scale_inplace_cuda"],
)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self.ext = matmul_ext

    def forward(self, A, B):
        C = self.ext.tiled_matmul_cuda(A.contiguous(), B.contiguous())
        self.ext.scale_inplace_cuda(C, self.scale)
        return C


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, A, B):
        return torch.matmul(A, B) * self.scale


M, K, N = 1024, 512, 768


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return [0.5]
