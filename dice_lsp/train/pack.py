"""Pieces (one sample's clean and noisy copies, with what to train) packed into rows that fill a token budget.

A row is one model input; its samples are separate segments, so the attention mask keeps them apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

IGNORE = -100  # target of a token that is not trained


@dataclass
class Piece:
    """One sample laid out for training: every tensor is [n]; `target` is the token to predict or IGNORE."""

    input_ids: torch.Tensor
    position: torch.Tensor
    copy: torch.Tensor
    target: torch.Tensor
    weight: torch.Tensor  # per token: 1/p in SFT; unused (1) in RL, where `extra` holds what the loss needs
    answer_tokens: int  # the normaliser: answer tokens of the sample (pads included)
    sample: int = 0  # which sample of the step this piece belongs to
    extra: dict[str, torch.Tensor] = field(default_factory=dict)  # per-token tensors of the RL loss

    def __len__(self) -> int:
        return int(self.input_ids.numel())


@dataclass
class Row:
    """Packed pieces as [B, T] tensors ready for the model, plus the per-token tensors of the loss."""

    input_ids: torch.Tensor
    position: torch.Tensor
    copy: torch.Tensor
    segment: torch.Tensor
    target: torch.Tensor
    weight: torch.Tensor
    sample: torch.Tensor  # per token: the step's sample index it comes from (-1 on row padding)
    extra: dict[str, torch.Tensor]

    @property
    def tokens(self) -> int:
        return int(self.input_ids.numel())

    def to(self, device) -> Row:
        move = {k: v.to(device, non_blocking=True) for k, v in self.extra.items()}
        return Row(*(t.to(device, non_blocking=True) for t in (
            self.input_ids, self.position, self.copy, self.segment, self.target, self.weight, self.sample)), move)


def group(pieces: list[Piece], budget: int) -> list[list[Piece]]:
    """Greedy packing in order: a new row starts when the next piece would pass `budget` tokens.

    A piece longer than the budget gets a row of its own (callers cut samples to fit beforehand).
    """
    rows: list[list[Piece]] = []
    used = 0
    for piece in pieces:
        if not rows or used + len(piece) > budget:
            rows.append([])
            used = 0
        rows[-1].append(piece)
        used += len(piece)
    return rows


def join(pieces: list[Piece], length: int | None = None, pad_id: int = 0) -> Row:
    """One [1, T] row of `pieces`, padded to `length` with tokens that only see themselves and are not trained."""
    parts = {name: torch.cat([getattr(p, name) for p in pieces]) for name in
             ("input_ids", "position", "copy", "target", "weight")}
    segment = torch.cat([torch.full((len(p),), i, dtype=torch.long) for i, p in enumerate(pieces)])
    sample = torch.cat([torch.full((len(p),), p.sample, dtype=torch.long) for p in pieces])
    keys = set().union(*(p.extra for p in pieces))
    extra = {k: torch.cat([p.extra[k] for p in pieces]) for k in sorted(keys)}
    pad = 0 if length is None else length - segment.numel()
    if pad > 0:
        parts["input_ids"] = torch.cat([parts["input_ids"], torch.full((pad,), pad_id, dtype=torch.long)])
        parts["position"] = torch.cat([parts["position"], torch.zeros(pad, dtype=torch.long)])
        parts["copy"] = torch.cat([parts["copy"], torch.zeros(pad, dtype=torch.long)])
        parts["target"] = torch.cat([parts["target"], torch.full((pad,), IGNORE, dtype=torch.long)])
        parts["weight"] = torch.cat([parts["weight"], torch.zeros(pad)])
        segment = torch.cat([segment, -1 - torch.arange(pad)])  # each pad its own segment
        sample = torch.cat([sample, torch.full((pad,), -1, dtype=torch.long)])
        extra = {k: torch.cat([v, torch.zeros(pad, dtype=v.dtype)]) for k, v in extra.items()}
    return Row(parts["input_ids"][None], parts["position"][None], parts["copy"][None], segment[None],
               parts["target"][None], parts["weight"][None], sample[None], {k: v[None] for k, v in extra.items()})


def stack(rows: list[Row]) -> Row:
    """Rows of equal length as one [B, T] batch."""
    cat = lambda name: torch.cat([getattr(r, name) for r in rows])  # noqa: E731
    extra = {k: torch.cat([r.extra[k] for r in rows]) for k in rows[0].extra}
    return Row(cat("input_ids"), cat("position"), cat("copy"), cat("segment"), cat("target"), cat("weight"),
               cat("sample"), extra)
