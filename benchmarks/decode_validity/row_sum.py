import torch
import torch.nn as nn


class Model(nn.Module):
    """Sums the input over one dimension and keeps that dimension with size one.

    Args:
        dim: the dimension to reduce.
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim, keepdim=True)


BATCH_SIZE = 32
DIM1 = 1024
DIM2 = 512
REDUCE_DIM = 1


def get_inputs():
    return [torch.rand(BATCH_SIZE, DIM1, DIM2)]


def get_init_inputs():
    return [REDUCE_DIM]
