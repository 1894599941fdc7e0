"""One GPU kernel for what a decode pass does between the q/k/v product and attention: QK-norm, RoPE, and the
K/V writes into the static cache, where PyTorch needs five (norm and rotary, a copy of q, two index_copy).

`rotate_and_store` computes what `engine.model.qk_norm_rotary` plus `StaticCache.update` do; tests compare them.
"""

from __future__ import annotations

import torch

from dice_lsp.engine.attention import INTERPRET

try:
    import triton
    import triton.language as tl
except ImportError:  # no Triton: callers take the PyTorch path
    triton = None


def usable(q: torch.Tensor) -> bool:
    """Whether the Triton kernel can run on these tensors: on a GPU, or on the CPU under Triton's interpreter."""
    if triton is None or torch.is_grad_enabled() and q.requires_grad:
        return False
    d = q.shape[-1]
    if d & (d - 1) or d > 256:
        return False
    return q.is_cuda or INTERPRET


def rotate_and_store(q, k, v, q_weight, k_weight, cos, sin, eps: float, k_cache, v_cache, slots) -> torch.Tensor:
    """QK-norm and RoPE of q and k [B, L, heads, D] (views of the q/k/v product are fine), k and v written to the
    caches [B, kv_heads, capacity, D] at positions `slots` [L]; returns the rotated q as [B, heads, L, D].

    cos, sin: [B, L, D]. Norms in fp32, then rounded to the input's dtype before the weight, as `rms_norm` does.
    """
    B, L, heads, D = q.shape
    kv_heads = k.shape[2]
    out = torch.empty((B, heads, L, D), dtype=q.dtype, device=q.device)
    _rotate_and_store[(B * L, heads + 2 * kv_heads)](
        q, k, v, q_weight, k_weight, cos, sin, k_cache, v_cache, slots, out,
        L, heads, kv_heads, eps,
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *cos.stride()[:2], *k_cache.stride()[:3],
        D=D, HALF=D // 2,
    )
    return out


if triton is not None:

    @triton.jit
    def _rotate_and_store(q, k, v, q_weight, k_weight, cos, sin, k_cache, v_cache, slots, out,
                          L, heads, kv_heads, eps,
                          qb, ql, qh, kb, kl, kh, vb, vl, vh, cb, cl, ob, oh, ot,
                          D: tl.constexpr, HALF: tl.constexpr):
        # One program per (batch row, position) and head: heads of q first, then of k, then of v.
        row, head = tl.program_id(0), tl.program_id(1)
        b, t = row // L, row % L
        lo = tl.arange(0, HALF)
        slot = tl.load(slots + t)
        if head >= heads + kv_heads:  # a value head: copied into the cache as it is
            h = head - heads - kv_heads
            src = v + b * vb + t * vl + h * vh
            dst = v_cache + b * ob + h * oh + slot * ot
            tl.store(dst + lo, tl.load(src + lo))
            tl.store(dst + HALF + lo, tl.load(src + HALF + lo))
        else:
            if head < heads:
                src = q + b * qb + t * ql + head * qh
                weight = q_weight
                dst = out + ((b * heads + head) * L + t) * D
            else:
                src = k + b * kb + t * kl + (head - heads) * kh
                weight = k_weight
                dst = k_cache + b * ob + (head - heads) * oh + slot * ot
            x1 = tl.load(src + lo).to(tl.float32)
            x2 = tl.load(src + HALF + lo).to(tl.float32)
            scale = tl.rsqrt((tl.sum(x1 * x1, 0) + tl.sum(x2 * x2, 0)) / D + eps)
            dtype = dst.dtype.element_ty
            # as rms_norm: normalised in fp32, rounded to the input's dtype, then scaled by the weight
            n1 = ((x1 * scale).to(dtype).to(tl.float32) * tl.load(weight + lo).to(tl.float32)).to(dtype)
            n2 = ((x2 * scale).to(dtype).to(tl.float32) * tl.load(weight + HALF + lo).to(tl.float32)).to(dtype)
            n1, n2 = n1.to(tl.float32), n2.to(tl.float32)
            c1 = tl.load(cos + b * cb + t * cl + lo).to(tl.float32)
            c2 = tl.load(cos + b * cb + t * cl + HALF + lo).to(tl.float32)
            s1 = tl.load(sin + b * cb + t * cl + lo).to(tl.float32)
            s2 = tl.load(sin + b * cb + t * cl + HALF + lo).to(tl.float32)
            tl.store(dst + lo, (n1 * c1 - n2 * s1).to(dtype))  # rotate-half RoPE
            tl.store(dst + HALF + lo, (n2 * c2 + n1 * s2).to(dtype))
