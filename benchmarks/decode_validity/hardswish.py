import torch
import torch.nn as nn

# Sizes of the test input
BATCH = 64
FEATURES = 8192


class Model(nn.Module):
    """
    A module that applies the hard-swish activation, x * relu6(x + 3) / 6.

    Args:
        inplace (bool): unused here, kept to mirror nn.Hardswish.
    """

    def __init__(self, inplace: bool = False):
        super(Model, self).__init__()
        self.inplace = inplace

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Applies hard-swish.

        Args:
            x (torch.Tensor): input of any shape.

        Returns:
            torch.Tensor: output of the same shape as x.
        """
        return x * torch.clamp(x + 3.0, 0.0, 6.0) / 6.0


def get_inputs():
    x = torch.rand(BATCH, FEATURES)
    return [x]


def get_init_inputs():
    return [False]
