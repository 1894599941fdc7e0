import torch
import torch.nn as nn

N = 1536  # side of both square matrices


class Model(nn.Module):
    """
    Plain product of two square matrices.
    """

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        """
        Multiplies A by B.

        Args:
            A (torch.Tensor): left factor, shape (N, N).
            B (torch.Tensor): right factor, shape (N, N).

        Returns:
            torch.Tensor: A @ B, shape (N, N).
        """
        return torch.matmul(A, B)


def get_inputs():
    A = torch.randn(N, N)
    B = torch.randn(N, N)
    return [A, B]


def get_init_inputs():
    return []  # nothing to configure
