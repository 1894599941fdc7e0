import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Leaky ReLU followed by clipping to a symmetric range."""

    def __init__(self, negative_slope: float = 0.02, bound: float = 4.0):
        super(Model, self).__init__()
        self.negative_slope = negative_slope
        self.bound = bound

    def forward(self, x):
        y = F.leaky_relu(x, negative_slope=self.negative_slope)
        return torch.clamp(y, -self.bound, self.bound)


batch = 128
dim = 16384


def get_inputs():
    return [torch.randn(batch, dim) * 3]


def get_init_inputs():
    return [0.02, 4.0]
