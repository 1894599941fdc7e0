import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Multiplies a matrix by a scalar: C = A * s.
    """
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A: torch.Tensor, s: float) -> torch.Tensor:
        """
        Args:
            A: matrix of shape (M, N).
            s: the scalar factor.

        Returns:
            The scaled matrix, shape (M, N).
        """
        return A * s

M = 8192
N = 2048

def get_inputs():
    A = torch.randn(M, N)
    s = 2.5
    return [A, s]

def get_init_inputs():
    return []  # no parameters
