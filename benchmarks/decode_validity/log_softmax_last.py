import torch
import torch.nn as nn


class Model(nn.Module):
    """
    LogSoftmax over the last dimension.

    Args:
        dim (int): dimension for the log-softmax; -1 by default.
    """

    def __init__(self, dim: int = -1):
        super(Model, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Args:
            x (torch.Tensor): scores of shape (batch_size, num_classes).

        Returns:
            torch.Tensor: log-probabilities, same shape.
        """
        return torch.log_softmax(x, dim=self.dim)


batch_size = 256
num_classes = 32768


def get_inputs():
    x = torch.randn(batch_size, num_classes)
    return [x]


def get_init_inputs():
    return [-1]
