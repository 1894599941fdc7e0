"""Average over the last axis of a 3-D tensor."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Mean along a fixed dimension.

    :param dim: which dimension to average over
    :param keepdim: keep the reduced dimension with size 1
    """

    def __init__(self, dim: int, keepdim: bool):
        super(Model, self).__init__()
        self.dim = dim
        self.keepdim = keepdim

    def forward(self, x):
        """Returns x.mean(dim) with the configured keepdim."""
        return torch.mean(x, dim=self.dim, keepdim=self.keepdim)


n_batch = 16
n_rows = 256
n_cols = 2048


def get_inputs():
    return [torch.rand(n_batch, n_rows, n_cols)]


def get_init_inputs():
    return [2, False]
