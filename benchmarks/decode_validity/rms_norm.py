"""Root-mean-square normalisation over the feature dimension, without a learned scale."""
import torch
import torch.nn as nn

batch_size = 16
num_features = 64
height = 128
width = 128


class Model(nn.Module):
    """
    RMS normalisation over dim 1.

    Args:
        num_features (int): size of dimension 1 of the input.
        eps (float): added to the mean square before the square root.
    """

    def __init__(self, num_features: int, eps: float = 1e-5):
        super(Model, self).__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Args:
            x (torch.Tensor): shape (batch_size, num_features, *).

        Returns:
            torch.Tensor: x divided by its RMS along dim 1.
        """
        rms = torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + self.eps)
        return x / rms


def get_inputs():
    x = torch.randn(batch_size, num_features, height, width)
    return [x]


def get_init_inputs():
    return [num_features]
