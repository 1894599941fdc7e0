"""The training forward: the model over a packed row, cross-entropy only where a token is trained.

Hidden states are gathered at the trained positions before the output head, so no [B, T, V] logits exist.
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from dice_lsp.engine.model import SDARModel
from dice_lsp.train.mask import dense_mask, flex_block_mask
from dice_lsp.train.pack import IGNORE, Row


class Objective(nn.Module):
    """Wraps the SDAR model so that DDP / FSDP see one forward: row -> per-token cross-entropy at trained tokens.

    attention: "sdpa" (a boolean mask, any device) or "flex" (FlexAttention with a block mask, CUDA).
    """

    def __init__(self, model: SDARModel, attention: str = "sdpa", ce_chunk: int = 4096):
        super().__init__()
        self.model = model
        self.attention = attention
        self.ce_chunk = ce_chunk
        if attention == "flex":
            use_flex_attention(model)

    def mask(self, row: Row):
        """The attention mask object for `row` (built outside autograd; cheap next to the forward)."""
        block = self.model.config.block_size
        with torch.no_grad():
            if self.attention == "flex":
                return flex_block_mask(row.segment, row.copy, row.position, block)
            return dense_mask(row.segment, row.copy, row.position, block)

    def forward(self, input_ids, position, mask, target):
        """Cross-entropy [M] (fp32) at the M positions whose target is not IGNORE, in row-major order."""
        hidden = self.hidden(input_ids, position, mask)
        chosen = (target.reshape(-1) != IGNORE).nonzero()[:, 0]
        states = hidden.reshape(-1, hidden.shape[-1]).index_select(0, chosen)
        targets = target.reshape(-1).index_select(0, chosen)
        losses = []
        for lo in range(0, states.shape[0], self.ce_chunk):
            part = (states[lo : lo + self.ce_chunk], targets[lo : lo + self.ce_chunk])
            if self.model.gradient_checkpointing and torch.is_grad_enabled():
                # Recompute the chunk's logits in backward instead of keeping [chunk, V] fp32 alive.
                losses.append(checkpoint(self._cross_entropy, *part, use_reentrant=False))
            else:
                losses.append(self._cross_entropy(*part))
        return torch.cat(losses) if losses else hidden.new_zeros(0, dtype=torch.float32)

    def _cross_entropy(self, states, targets):
        return F.cross_entropy(self.model.lm_head(states).float(), targets, reduction="none")

    def hidden(self, input_ids, position, mask):
        """model.hidden with a boolean mask (SDPA); with a BlockMask, the same trunk walked here with FlexAttention."""
        model = self.model
        if self.attention != "flex":
            return model.hidden(input_ids, position, mask)
        x = model.model.embed_tokens(input_ids)
        cos, sin = rope(position, model.config.head_dim, model.config.rope_theta, x.dtype)
        for layer in model.model.layers:
            if model.gradient_checkpointing and torch.is_grad_enabled():
                x = checkpoint(layer, x, cos, sin, mask, use_reentrant=False)
            else:
                x = layer(x, cos, sin, mask)
        return model.model.norm(x)


_compiled_flex = None


def _flex(q, k, v, block_mask, scale):
    global _compiled_flex
    if _compiled_flex is None:
        from torch.nn.attention.flex_attention import flex_attention  # 0.4 s to import: only --attention flex

        # Uncompiled FlexAttention materialises the scores; compiled, it is a fused kernel that skips empty tiles.
        _compiled_flex = torch.compile(flex_attention, dynamic=False) if q.is_cuda else flex_attention
    return _compiled_flex(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=True)


def _flex_forward(self, x, cos, sin, mask, cache=None, residual=None):
    """engine.model.Attention.forward with FlexAttention when given a BlockMask; any other mask (decoding's) goes
    to the class's own forward."""
    from torch.nn.attention.flex_attention import BlockMask  # installed only for --attention flex; see _flex

    if not isinstance(mask, BlockMask):
        return type(self).forward(self, x, cos, sin, mask, cache, residual)
    B, L, _ = x.shape
    q = rotate(self.q_norm(self.q_proj(x).view(B, L, self.heads, self.head_dim)), cos, sin).transpose(1, 2)
    k = rotate(self.k_norm(self.k_proj(x).view(B, L, self.kv_heads, self.head_dim)), cos, sin).transpose(1, 2)
    v = self.v_proj(x).view(B, L, self.kv_heads, self.head_dim).transpose(1, 2)
    y = self.o_proj(_flex(q, k, v, mask, self.head_dim**-0.5).transpose(1, 2).reshape(B, L, -1))
    return y if residual is None else residual + y


def rope(position: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype):
    """cos and sin [B, L, 1, head_dim] of RoPE's rotate-half form, computed in fp32 (as the model does)."""
    exponents = torch.arange(0, head_dim, 2, device=position.device, dtype=torch.int64).float() / head_dim
    angles = position[..., None].float() / (theta**exponents)
    angles = torch.cat((angles, angles), dim=-1)[:, :, None]
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, L, heads, D] rotated by its positions' angles."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def use_flex_attention(model: SDARModel) -> None:
    """Let each layer's attention take a BlockMask: the Attention modules get this forward per instance (a BlockMask
    needs its own q/k/v path, not just another attention kernel); with a boolean mask (decoding, RL rollouts) they
    behave exactly as before."""
    for layer in model.model.layers:
        layer.self_attn.forward = types.MethodType(_flex_forward, layer.self_attn)
