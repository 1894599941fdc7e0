"""Who may attend to whom in a packed training row: docs/ALGORITHMS.md section 3's three rules, as one function.

Every token carries (segment, copy, position). Copy 0 is the clean sequence; copies 1.. are noisy copies of it.
"""

from __future__ import annotations

import torch


def may_attend(seg_q, copy_q, block_q, seg_k, copy_k, block_k):
    """True where a query may see a key (elementwise, broadcasting; tensors or the scalars FlexAttention passes).

    (a) same copy and same block, bidirectionally; (b) a noisy query sees clean keys of strictly earlier blocks;
    (c) clean queries see clean keys of their own or earlier blocks. Different segments (packed samples) never meet.
    """
    same_copy_block = (copy_q == copy_k) & (block_q == block_k)
    noisy_sees_clean_past = (copy_q != 0) & (copy_k == 0) & (block_k < block_q)
    clean_causal = (copy_q == 0) & (copy_k == 0) & (block_k <= block_q)
    return (seg_q == seg_k) & (same_copy_block | noisy_sees_clean_past | clean_causal)


def dense_mask(segment: torch.Tensor, copy: torch.Tensor, position: torch.Tensor, block_size: int) -> torch.Tensor:
    """The [B, 1, T, T] boolean mask (True = may attend) of rows described by [B, T] segment, copy and position."""
    block = position // block_size
    allowed = may_attend(
        segment[:, :, None], copy[:, :, None], block[:, :, None],
        segment[:, None, :], copy[:, None, :], block[:, None, :],
    )
    return allowed[:, None]


def flex_block_mask(segment: torch.Tensor, copy: torch.Tensor, position: torch.Tensor, block_size: int,
                    tile: int = 128):
    """The same rule as a FlexAttention BlockMask, so attention skips the tiles no query may see (GPU fast path)."""
    from torch.nn.attention.flex_attention import create_block_mask  # 0.4 s to import: only --attention flex

    block = position // block_size

    def mask_mod(b, h, q, k):
        return may_attend(segment[b, q], copy[b, q], block[b, q], segment[b, k], copy[b, k], block[b, k])

    B, T = segment.shape
    return create_block_mask(mask_mod, B, None, T, T, device=segment.device, BLOCK_SIZE=tile)
