"""A problem in KernelBench's format: soft-thresholding each row of a matrix by its own threshold.

sign(x) * max(|x| - t, 0) is the proximal step of an L1 penalty (ISTA, wavelet denoising): values closer to zero than
their row's threshold become zero, the rest move towards zero by it.
"""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
        return torch.sign(x) * torch.relu(x.abs() - threshold)


ROWS, COLS = 2048, 1024


def get_inputs():
    return [torch.randn(ROWS, COLS), torch.rand(ROWS, 1) * 0.5]


def get_init_inputs():
    return []
