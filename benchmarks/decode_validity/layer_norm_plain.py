import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Layer normalisation over the last dimension, with no learned affine transform.

    Args:
        hidden (int): size of the last dimension.
        eps (float, optional): numerical guard. Defaults to 1e-6.
    """

    def __init__(self, hidden: int, eps: float = 1e-6):
        super(Model, self).__init__()
        self.hidden = hidden
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Args:
            x (torch.Tensor): (batch, tokens, hidden)

        Returns:
            torch.Tensor: normalised x, same shape.
        """
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return (x - mean) / torch.sqrt(var + self.eps)


batch = 8
tokens = 512
hidden = 768


def get_inputs():
    x = torch.randn(batch, tokens, hidden)
    return [x]


def get_init_inputs():
    return [hidden]
