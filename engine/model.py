"""The SDAR model: Qwen3 decoder layers whose attention is block-causal, readable top to bottom like nanoGPT.

Parameter names equal the HF checkpoint's (`model.layers.N.self_attn.q_proj.weight`, ..., `lm_head.weight`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from dice_lsp.engine.config import ModelConfig


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Root-mean-square norm computed in fp32, then scaled in the input's dtype (as Qwen3 does)."""
    dtype = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


def rotary(position_ids: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype):
    """cos and sin [B, L, head_dim] of RoPE's rotate-half form, computed in fp32."""
    exponents = torch.arange(0, head_dim, 2, device=position_ids.device, dtype=torch.int64).float() / head_dim
    inv_freq = 1.0 / (theta**exponents)
    angles = position_ids[..., None].float() * inv_freq
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [B, L, heads, D] by the angles of its positions."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, :, None] + rotated * sin[:, :, None]


def qk_norm_rotary(q, k, q_weight, k_weight, cos, sin, eps: float):
    """QK-norm (per head, over head_dim) then RoPE, for queries and keys [B, L, heads, D]."""
    return apply_rotary(rms_norm(q, q_weight, eps), cos, sin), apply_rotary(rms_norm(k, k_weight, eps), cos, sin)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up


def rotate_and_update(cache, layer: int, q, k, v, q_weight, k_weight, cos, sin, eps: float):
    """QK-norm and RoPE of q and k [B, L, heads, D], then the cache's update (if any): q, k, v as [B, heads, L, D],
    k and v with the cached positions first."""
    q, k = kernels_of(cache).qk_norm_rotary(q, k, q_weight, k_weight, cos, sin, eps)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if cache is not None:
        k, v = cache.update(layer, k, v)
    return q, k, v


def attention(q, k, v, mask, scale: float, length: int) -> torch.Tensor:
    """Attention of query heads folded into the query length, q [B, kv_heads, group * length, D] over k, v
    [B, kv_heads, Lk, D]; returns the heads merged again, [B, length, heads * D]."""
    B, kv_heads, rows, D = q.shape
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return y.reshape(B, kv_heads * rows // length, length, D).transpose(1, 2).reshape(B, length, -1)


def add_projection(residual: torch.Tensor, x: torch.Tensor, linear: nn.Linear) -> torch.Tensor:
    """residual + linear(x). Without autograd it is one matmul that adds the residual as it writes its output
    (beta = 1), not a matmul and then an elementwise kernel."""
    if torch.is_grad_enabled():
        return residual + linear(x)
    flat = torch.addmm(residual.reshape(-1, residual.shape[-1]), x.reshape(-1, x.shape[-1]), linear.weight.t())
    return flat.view(residual.shape)


@dataclass(frozen=True)
class Kernels:
    """The pieces of a layer between its products. A pass calls them through the Kernels of the cache it is given
    (`kernels_of`), so a runner can bring its own for its passes alone (`engine.fast`: torch.compile'd norms, a
    Triton attention) while every other caller keeps these. Same math either way."""

    rms_norm: Callable = rms_norm
    qk_norm_rotary: Callable = qk_norm_rotary
    swiglu: Callable = swiglu
    attention: Callable = attention
    add_projection: Callable = add_projection


EAGER = Kernels()  # the functions above, as written: training, the plain runner, and any call without a runner


def kernels_of(cache) -> Kernels:
    """The kernels of a pass: its cache's, which the runner that made the cache chose; without a cache, the eager
    ones. They ride on the cache so that the modules' forward signatures (which training may replace) stay as they
    are."""
    return getattr(cache, "kernels", EAGER)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor, kernels: Kernels = EAGER) -> torch.Tensor:
        return kernels.rms_norm(x, self.weight, self.eps)


def block_causal_mask(query_positions: torch.Tensor, key_positions: torch.Tensor, block_size: int) -> torch.Tensor:
    """[B, 1, Lq, Lk] bool, True where a query may attend: the key's block is not later than the query's."""
    if query_positions.dim() == 1:
        query_positions = query_positions[None]
    if key_positions.dim() == 1:
        key_positions = key_positions[None]
    return (key_positions // block_size)[:, None, None, :] <= (query_positions // block_size)[:, None, :, None]


class KVCache:
    """Keys and values of final tokens, per layer, as [B, kv_heads, T, head_dim]; grows by concatenation.

    `update` returns cached + new keys and values for attention and keeps the new ones only while `write` is True,
    so a denoising pass reads the cache and the pass over a block's final tokens extends it. With `keep` set, only
    the first `keep` new positions are kept: a pass over a finished block and the next one writes the first only.
    """

    kernels = EAGER  # the plain runner's passes run the model's own kernels

    def __init__(self, layers: int):
        self.keys: list[torch.Tensor | None] = [None] * layers
        self.values: list[torch.Tensor | None] = [None] * layers
        self.write = False
        self.keep: int | None = None

    @property
    def length(self) -> int:
        return 0 if self.keys[0] is None else self.keys[0].shape[2]

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        new = k.shape[2]
        if self.keys[layer] is not None:
            k = torch.cat((self.keys[layer], k), dim=2)
            v = torch.cat((self.values[layer], v), dim=2)
        if self.write:
            end = None if self.keep is None else k.shape[2] - new + self.keep
            self.keys[layer], self.values[layer] = k[:, :, :end], v[:, :, :end]
        return k, v


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, index: int):
        super().__init__()
        self.index = index
        self.heads, self.kv_heads, self.head_dim = (
            config.num_attention_heads, config.num_key_value_heads, config.head_dim,
        )
        d = config.hidden_size
        self.q_proj = nn.Linear(d, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(d, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, d, bias=False)
        self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)  # QK-norm: per head, before RoPE
        self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        self.qkv_weight: torch.Tensor | None = None  # q, k, v weights in one tensor: see engine.fast.fuse_projections

    def forward(self, x, cos, sin, mask, cache=None, residual=None):
        """residual + attention(x); without a residual, attention(x) alone."""
        B, L, _ = x.shape
        if self.qkv_weight is not None and not torch.is_grad_enabled():  # one matmul instead of three
            q, k, v = F.linear(x, self.qkv_weight).split([self.q_proj.out_features, self.k_proj.out_features,
                                                          self.v_proj.out_features], dim=-1)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q = q.view(B, L, self.heads, self.head_dim)
        k = k.view(B, L, self.kv_heads, self.head_dim)
        v = v.view(B, L, self.kv_heads, self.head_dim)
        norms = (self.q_norm.weight, self.k_norm.weight, cos, sin, self.q_norm.eps)
        if hasattr(cache, "rotate_and_update"):  # the static cache, which does it in one kernel on a GPU
            q, k, v = cache.rotate_and_update(self.index, q, k, v, *norms)
        else:
            q, k, v = rotate_and_update(cache, self.index, q, k, v, *norms)
        # Grouped-query attention: the query heads sharing a KV head are folded into the query length, so every
        # SDPA backend takes it without copying K/V; `mask` was folded the same way by the caller.
        group = self.heads // self.kv_heads
        q = q.reshape(B, self.kv_heads, group * L, self.head_dim)
        kernels = kernels_of(cache)
        y = kernels.attention(q, k, v, mask, self.head_dim**-0.5, L)
        return self.o_proj(y) if residual is None else kernels.add_projection(residual, y, self.o_proj)


class MLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.gate_up_weight: torch.Tensor | None = None  # see engine.fast.fuse_projections

    def forward(self, x, residual=None, kernels: Kernels = EAGER):
        """residual + mlp(x); without a residual, mlp(x) alone."""
        if self.gate_up_weight is not None and not torch.is_grad_enabled():
            gate, up = F.linear(x, self.gate_up_weight).chunk(2, dim=-1)
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)
        h = kernels.swiglu(gate, up)
        return self.down_proj(h) if residual is None else kernels.add_projection(residual, h, self.down_proj)


class Layer(nn.Module):
    """Pre-norm residual: x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: ModelConfig, index: int):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config, index)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x, cos, sin, mask, cache=None):
        kernels = kernels_of(cache)
        x = self.self_attn(self.input_layernorm(x, kernels), cos, sin, mask, cache, residual=x)
        return self.mlp(self.post_attention_layernorm(x, kernels), residual=x, kernels=kernels)


class Trunk(nn.Module):
    """Everything but the output head: HF's `model.` prefix."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Layer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class SDARModel(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.model = Trunk(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.gradient_checkpointing = False
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, input_ids, position_ids=None, attention_mask=None, cache: KVCache | None = None):
        """Logits [B, L, V]. SDAR: the logit at position i predicts the token at position i (no shift); a plain
        causal Qwen3 (config.causal): the logit at i predicts the token at i + 1.

        attention_mask: bool [B, 1, L, Lk] or [L, Lk], True where a query may attend to a key (Lk counts cached
        keys first). None means block-causal with config.block_size, from position 0 (or from the cache's end).
        """
        return self.logits(self.hidden(input_ids, position_ids, attention_mask, cache))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The output head over final-normed hidden states."""
        return self.lm_head(hidden)

    def hidden(self, input_ids, position_ids=None, attention_mask=None, cache: KVCache | None = None):
        """The final-normed hidden states [B, L, D]: `forward` without the output head. The layers' pieces run on
        the cache's kernels (`kernels_of`): a runner's own, or the eager ones."""
        B, L = input_ids.shape
        past = 0 if cache is None else cache.length
        if position_ids is None:
            position_ids = torch.arange(past, past + L, device=input_ids.device)[None].expand(B, L)
        if attention_mask is None:
            keys = torch.arange(past + L, device=input_ids.device)
            attention_mask = block_causal_mask(position_ids, keys, self.config.block_size)
        x = self.model.embed_tokens(input_ids)
        mask = fold_mask(attention_mask, self.config.num_attention_heads // self.config.num_key_value_heads, x.dtype)
        cos, sin = rotary(position_ids, self.config.head_dim, self.config.rope_theta, x.dtype)
        for layer in self.model.layers:
            if self.gradient_checkpointing and self.training and torch.is_grad_enabled():
                x = checkpoint(layer, x, cos, sin, mask, use_reentrant=False)
            else:
                x = layer(x, cos, sin, mask, cache)
        return self.model.norm(x, kernels_of(cache))


def fold_mask(mask: torch.Tensor, group: int, dtype: torch.dtype) -> torch.Tensor:
    """A [B, 1, L, Lk] (or [L, Lk]) bool mask repeated for the `group` query heads folded into the query length,
    as the additive float mask SDPA would otherwise rebuild in every layer."""
    if mask.dim() == 2:
        mask = mask[None, None]
    if mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))
    return mask.repeat(1, 1, group, 1) if group > 1 else mask
