"""Verify stage: trial inputs with fresh seeds, the outputs of each side, and their element-by-element comparison.

The reference worker makes the inputs and keeps the expected outputs; the solution worker only ever sees inputs.
"""

from __future__ import annotations

import math
from typing import Any

import torch

CHANGED_SEED_OFFSET = 10_000  # the in-place changed inputs use seed + this


def trial_seeds(seed: int, trials: int) -> list[int]:
    return [seed + 1 + i for i in range(trials)]


def flatten(value: Any) -> list[torch.Tensor]:
    """Outputs as a flat list of tensors: tuples and lists element by element, numbers as 0-d tensors."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in flatten(item)]
    if isinstance(value, (int, float, bool)):
        return [torch.tensor(value)]
    raise TypeError(f"forward returned {type(value).__name__}, which cannot be compared")


def to_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (tuple, list)):
        return type(value)(to_device(v, device) for v in value)
    return value


def detach_cpu(values: list[torch.Tensor]) -> list[torch.Tensor]:
    return [v.detach().to("cpu", copy=True) for v in values]


def change_in_place(inputs: list[Any], changed: list[Any]) -> int:
    """Copy new values into the same tensors (same storage, same pointers); returns how many tensors changed."""
    count = 0
    for tensor, new in zip(inputs, changed):
        if isinstance(tensor, torch.Tensor) and isinstance(new, torch.Tensor) and tensor.shape == new.shape:
            with torch.no_grad():
                tensor.copy_(new)
            count += 1
    return count


def unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The index of element `flat` of a contiguous tensor of `shape` (torch.unravel_index imports sympy: ~1.5 s)."""
    index = []
    for size in reversed(shape):
        flat, rest = divmod(flat, size)
        index.append(rest)
    return tuple(reversed(index))


def compare(got: list[torch.Tensor], expected: list[torch.Tensor], atol: float, rtol: float) -> dict[str, Any]:
    """Compare outputs like torch.allclose, and say how far off the worst element is and where."""
    result: dict[str, Any] = {"passed": True, "max_abs_error": 0.0, "max_rel_error": 0.0, "where": "",
                              "relative_l2": 0.0, "note": "", "dtype_notes": []}
    if len(got) != len(expected):
        return {**result, "passed": False, "note": f"{len(got)} outputs, the reference has {len(expected)}"}
    diff_sq, ref_sq, worst = 0.0, 0.0, -math.inf
    for i, (g, e) in enumerate(zip(got, expected)):
        label = "output" if len(got) == 1 else f"output[{i}]"
        if g.shape != e.shape:
            return {**result, "passed": False, "note": f"{label} has shape {tuple(g.shape)}, expected {tuple(e.shape)}"}
        if g.dtype != e.dtype:
            result["dtype_notes"].append(f"{label} is {g.dtype}, the reference is {e.dtype}")
        g64, e64 = g.to(torch.float64), e.to(torch.float64)
        if g.numel() == 0:
            continue
        if not torch.isfinite(g64).all() and not (torch.isnan(g64) == torch.isnan(e64)).all():
            result.update(passed=False, note=f"{label} has NaN or inf where the reference has none")
        abs_err = (g64 - e64).abs()
        abs_err = torch.where(torch.isnan(abs_err), torch.full_like(abs_err, math.inf), abs_err)
        rel_err = abs_err / e64.abs().clamp_min(1e-12)
        excess = abs_err - (atol + rtol * e64.abs())
        flat = int(torch.argmax(excess).item())
        if float(excess.view(-1)[flat]) > worst:
            worst = float(excess.view(-1)[flat])
            index = unravel(flat, tuple(g.shape))
            result["where"] = f"{label}[{', '.join(map(str, index))}]" if index else label
        result["max_abs_error"] = max(result["max_abs_error"], float(abs_err.max()))
        result["max_rel_error"] = max(result["max_rel_error"], float(rel_err.max()))
        if not torch.allclose(g64, e64, atol=atol, rtol=rtol):
            result["passed"] = False
        finite = torch.isfinite(abs_err)
        diff_sq += float((abs_err[finite] ** 2).sum()) + (math.inf if not finite.all() else 0.0)
        ref_sq += float((e64[torch.isfinite(e64)] ** 2).sum())
    result["relative_l2"] = math.sqrt(diff_sq) / math.sqrt(ref_sq) if ref_sq > 0 else (0.0 if diff_sq == 0 else math.inf)
    return result
