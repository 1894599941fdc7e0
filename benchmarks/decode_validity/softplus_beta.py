import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """
    Softplus with a sharpness parameter.

    Parameters
    ----------
    beta : float
        Sharpness; larger values approach ReLU.
    threshold : float
        Above ``beta * x > threshold`` the function is the identity.
    """

    def __init__(self, beta: float = 2.0, threshold: float = 15.0) -> None:
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return F.softplus(inputs, beta=self.beta, threshold=self.threshold)


def get_inputs():
    batch, length = 32, 65536
    return [torch.randn(batch, length)]


def get_init_inputs():
    return [2.0, 15.0]
