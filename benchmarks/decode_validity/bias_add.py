import torch
import torch.nn as nn

ROWS: int = 4096
COLS: int = 1024


class Model(nn.Module):
    # Adds a per-column bias vector to every row of a matrix (broadcast over rows).
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, matrix: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return matrix + bias


def get_inputs():
    matrix = torch.randn(ROWS, COLS)
    bias = torch.randn(COLS)
    return [matrix, bias]


def get_init_inputs():
    return []
