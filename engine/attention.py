"""Attention for block-diffusion decode passes: a few query rows against a long KV cache, as a split-KV Triton kernel.

`block_attention` is a drop-in for the model's SDPA call plus its head merge; it falls back to SDPA wherever it can't.
"""

from __future__ import annotations

import math
import os

import torch

from dice_lsp.engine.model import attention as model_attention

try:
    import triton
    import triton.language as tl
except ImportError:  # the engine runs (through SDPA) without triton
    triton = None

# Triton's interpreter runs the kernels on CPU tensors; it is chosen when @triton.jit runs, i.e. at import.
INTERPRET = os.environ.get("TRITON_INTERPRET", "").lower() in ("1", "true", "yes", "on")
TARGET_PROGRAMS = 256  # about two programs per SM of an H200 (132 SMs): enough in flight to stream K/V at full speed
MIN_SPLIT_KEYS = 128  # a split shorter than this costs more in its partial result and the combine than it saves
MAX_SPLITS = 64  # the combine kernel holds every split's partial row at once
MAX_QUERY_ROWS = 64  # query rows (heads of a group x block positions) one program holds in registers

# The model's own SDPA call and head merge: the fallback, and what the kernel must equal.
reference_attention = model_attention


def supported(q, k, v, mask, query_len: int) -> bool:
    """Whether `split_attention` takes these inputs; `block_attention` uses SDPA otherwise."""
    if triton is None or mask is None or q.dim() != 4 or k.dim() != 4:
        return False
    if not (q.is_cuda or INTERPRET):
        return False
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, mask)):
        return False
    B, kv_heads, rows, D = q.shape
    N = k.shape[2]
    return (
        q.dtype in (torch.float16, torch.bfloat16, torch.float32)
        and k.dtype == v.dtype == q.dtype
        and mask.is_floating_point()
        and k.shape == v.shape == (B, kv_heads, N, D)
        and N > 0
        and 16 <= D <= 256 and D & (D - 1) == 0  # tl.dot wants power-of-two tiles of at least 16
        and rows <= MAX_QUERY_ROWS and query_len > 0 and rows % query_len == 0
        and mask.dim() == 4 and mask.shape[1] == 1 and mask.shape[0] in (1, B) and tuple(mask.shape[2:]) == (rows, N)
    )


def block_attention(q, k, v, mask, scale, query_len: int) -> torch.Tensor:
    """softmax(q k^T * scale + mask) v with heads merged: [B, L, Hkv*G*D], element (b, l, (kv*G + g)*D + d).

    q is [B, Hkv, G*L, D] with query head kv*G + g at rows g*L + l; k, v are [B, Hkv, N, D] (any strides, e.g. a
    slice of a static cache); mask is an additive float mask [B or 1, 1, G*L, N]. A row whose keys are all masked
    gives zeros here (SDPA gives NaN); the engine never builds one, as every row sees at least its own block.
    """
    if supported(q, k, v, mask, query_len):
        return split_attention(q, k, v, mask, scale, query_len)
    return reference_attention(q, k, v, mask, scale, query_len)


def launch_shape(q: torch.Tensor, block_rows: int) -> tuple[int, int]:
    """(keys per loop step, warps): K/V tiles of at most 16 KiB, and 8 warps once a program's q block or score
    tile is wide. Checked against sm_90 builds: no register spills for any D up to 256 with M <= 32."""
    row_bytes = q.shape[3] * q.element_size()
    tile = max(16, min(64, 16384 // row_bytes))
    width = max(row_bytes, 4 * tile)  # bytes per query row of q or of the fp32 scores
    return tile, 4 if block_rows * width <= 4096 else 8


def split_count(batch_heads: int, keys: int, tile: int, splits: int | None = None) -> tuple[int, int]:
    """(splits, keys per split) from shapes only, so the call can be captured in a CUDA graph.

    When there are few (batch, kv head) pairs, each one's keys are split until about TARGET_PROGRAMS programs run,
    each over at least MIN_SPLIT_KEYS keys; a split's length is a whole number of tiles, and no split is empty.
    """
    if splits is None:
        splits = max(1, min(ceil_div(TARGET_PROGRAMS, batch_heads), keys // MIN_SPLIT_KEYS, MAX_SPLITS))
    chunk = ceil_div(ceil_div(keys, splits), tile) * tile
    return ceil_div(keys, chunk), chunk


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def split_attention(q, k, v, mask, scale, query_len: int, splits: int | None = None) -> torch.Tensor:
    """The Triton path of `block_attention` (see there), with `splits` forced for tests."""
    B, kv_heads, rows, D = q.shape
    N = k.shape[2]
    group = rows // query_len
    scale = D**-0.5 if scale is None else scale
    block_rows = max(16, triton.next_power_of_2(rows))  # tl.dot's smallest tile is 16; padding rows are masked
    tile, warps = launch_shape(q, block_rows)
    splits, chunk = split_count(B * kv_heads, N, tile, splits)
    mask = mask.expand(B, 1, rows, N)
    out = torch.empty(B, query_len, kv_heads * group * D, dtype=q.dtype, device=q.device)
    if splits > 1:  # partial (max, sum, unnormalised output) per split, merged by `combine_splits`
        row_max = torch.empty(B * kv_heads, splits, rows, dtype=torch.float32, device=q.device)
        row_sum = torch.empty_like(row_max)
        partial = torch.empty(B * kv_heads, splits, rows, D, dtype=torch.float32, device=q.device)
    else:  # one split writes the output itself; the scratch arguments are never read
        row_max = row_sum = partial = out
    attend_split[(B * kv_heads, splits)](
        q, k, v, mask, out, row_max, row_sum, partial,
        *q.stride(), *k.stride(), *v.stride(), mask.stride(0), mask.stride(2), mask.stride(3),
        kv_heads, rows, query_len, group, N, chunk, splits, scale * math.log2(math.e),
        BLOCK_M=block_rows, BLOCK_N=tile, D=D, IEEE=q.dtype == torch.float32, DIRECT=splits == 1,
        num_warps=warps, num_stages=2,
    )
    if splits > 1:
        block_splits = triton.next_power_of_2(splits)
        combine_splits[(B * kv_heads, rows)](
            row_max, row_sum, partial, out, kv_heads, rows, query_len, group, splits,
            BLOCK_S=block_splits, D=D, num_warps=4 if block_splits * D <= 2048 else 8,
        )
    return out


if triton is not None:

    @triton.jit
    def store_merged(out_ptr, values, b, h, offs_m, offs_d, kv_heads, rows, query_len, group, D: tl.constexpr):
        # Folded row m = g*L + l of kv head h is query head h*G + g at block position l: element (b, l, head*D + d)
        # of the [B, L, H*D] output, so the caller needs no transpose.
        head = h * group + offs_m // query_len
        pos = offs_m % query_len
        offset = (b * query_len + pos).to(tl.int64) * (kv_heads * group * D) + head * D
        ptrs = out_ptr + offset[:, None] + offs_d[None, :]
        tl.store(ptrs, values.to(out_ptr.dtype.element_ty), mask=(offs_m < rows)[:, None])

    @triton.jit
    def attend_split(
        q_ptr, k_ptr, v_ptr, mask_ptr, out_ptr, max_ptr, sum_ptr, partial_ptr,
        sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd, smb, smm, smn,
        kv_heads, rows, query_len, group, N, chunk, splits, qk_scale,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr, IEEE: tl.constexpr, DIRECT: tl.constexpr,
    ):
        # One program: every query row of one (batch, kv head) against keys [lo, hi) of one split, online softmax in
        # base 2 (qk_scale holds log2 e, so exp2 gives the same weights as exp).
        pid = tl.program_id(0)
        split = tl.program_id(1)
        b = pid // kv_heads
        h = pid % kv_heads
        offs_m = tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, D)
        offs_n = tl.arange(0, BLOCK_N)
        row_ok = offs_m < rows
        q_base = q_ptr + b.to(tl.int64) * sqb + h.to(tl.int64) * sqh
        q = tl.load(q_base + offs_m[:, None] * sqm + offs_d[None, :] * sqd, mask=row_ok[:, None], other=0.0)
        k_base = k_ptr + b.to(tl.int64) * skb + h.to(tl.int64) * skh
        v_base = v_ptr + b.to(tl.int64) * svb + h.to(tl.int64) * svh
        mask_base = mask_ptr + b.to(tl.int64) * smb + offs_m[:, None] * smm

        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, D], tl.float32)
        lo = split * chunk
        hi = tl.minimum(lo + chunk, N)
        for start in range(lo, hi, BLOCK_N):
            keys = start + offs_n
            key_ok = keys < hi
            k_t = tl.load(k_base + keys[None, :] * skn + offs_d[:, None] * skd, mask=key_ok[None, :], other=0.0)
            if IEEE:  # fp32 inputs: full-precision products, not TF32
                s = tl.dot(q, k_t, input_precision="ieee")
            else:
                s = tl.dot(q, k_t)
            bias = tl.load(mask_base + keys[None, :] * smn, mask=row_ok[:, None] & key_ok[None, :], other=0.0)
            s = s * qk_scale + bias.to(tl.float32) * 1.4426950408889634
            s = tl.where(key_ok[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            # While a row has seen only masked keys its max is -inf; subtracting 0 instead keeps exp2 at 0, not NaN.
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.exp2(s - m_safe[:, None])
            alpha = tl.exp2(m_i - m_safe)
            l_i = l_i * alpha + tl.sum(p, 1)
            v_tile = tl.load(v_base + keys[:, None] * svn + offs_d[None, :] * svd, mask=key_ok[:, None], other=0.0)
            if IEEE:
                acc = acc * alpha[:, None] + tl.dot(p, v_tile, input_precision="ieee")
            else:
                acc = acc * alpha[:, None] + tl.dot(p.to(v_tile.dtype), v_tile)
            m_i = m_new

        if DIRECT:
            # A row with no visible key has l = 0 and acc = 0: its output is zeros.
            out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
            store_merged(out_ptr, out, b, h, offs_m, offs_d, kv_heads, rows, query_len, group, D)
        else:
            slot = (pid * splits + split).to(tl.int64) * rows + offs_m
            tl.store(max_ptr + slot, m_i, mask=row_ok)
            tl.store(sum_ptr + slot, l_i, mask=row_ok)
            tl.store(partial_ptr + slot[:, None] * D + offs_d[None, :], acc, mask=row_ok[:, None])

    @triton.jit
    def combine_splits(
        max_ptr, sum_ptr, partial_ptr, out_ptr, kv_heads, rows, query_len, group, splits,
        BLOCK_S: tl.constexpr, D: tl.constexpr,
    ):
        # One program per (batch, kv head, row): rescale each split's partial result to the row's overall max.
        pid = tl.program_id(0)
        row = tl.program_id(1)
        offs_s = tl.arange(0, BLOCK_S)
        offs_d = tl.arange(0, D)
        split_ok = offs_s < splits
        slot = (pid * splits + offs_s).to(tl.int64) * rows + row
        m_s = tl.load(max_ptr + slot, mask=split_ok, other=float("-inf"))
        l_s = tl.load(sum_ptr + slot, mask=split_ok, other=0.0)
        acc_s = tl.load(partial_ptr + slot[:, None] * D + offs_d[None, :], mask=split_ok[:, None], other=0.0)
        m = tl.max(m_s, 0)
        weight = tl.exp2(m_s - tl.where(m == float("-inf"), 0.0, m))  # splits that saw no key weigh 0
        total = tl.sum(weight * l_s, 0)
        out = tl.sum(weight[:, None] * acc_s, 0) / tl.where(total > 0, total, 1.0)
        offs_m = row + tl.arange(0, 1)
        store_merged(out_ptr, out[None, :], pid // kv_heads, pid % kv_heads, offs_m, offs_d,
                     kv_heads, rows, query_len, group, D)
