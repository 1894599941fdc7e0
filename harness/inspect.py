"""Inspect stage: what the solution's forward actually did at run time (kernels launched, threads, TF32 switches).

Profiler kernel names are mangled or demangled C++ names; a kernel of the solution is found by its function name.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Callable

import torch
from torch.profiler import ProfilerActivity, profile  # loaded with torch itself: no cost of its own


def precision_state() -> dict[str, Any]:
    return {"tf32": bool(torch.backends.cuda.matmul.allow_tf32), "cudnn_tf32": bool(torch.backends.cudnn.allow_tf32),
            "matmul_precision": torch.get_float32_matmul_precision()}


def set_precision(tf32: bool, cudnn_tf32: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = cudnn_tf32


def names_kernel(profiler_name: str, function: str) -> bool:
    """Is `function` the kernel behind this profiler name? ("void add_kernel<float>(float*)", "_Z10add_kernelPf")"""
    name = re.escape(function)
    if re.search(rf"(?:^|[^A-Za-z0-9_]){name}(?:$|[^A-Za-z0-9_])", profiler_name):
        return True
    return bool(re.search(rf"(?<!\d){len(function)}{name}", profiler_name))  # Itanium mangling: <length><name>


def thread_ids() -> set[int | None]:
    return {t.ident for t in threading.enumerate()}


def new_threads_since(before: set[int | None]) -> list[str]:
    """Names of threads started since `before` and still running (work hidden from the timer on another thread)."""
    return [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()]


def kernels(forward: Callable[[], Any], own: list[str], repeats: int = 3) -> list[dict[str, Any]]:
    """Each GPU kernel's share of forward's device time, marking the solution's own kernels."""
    with torch.no_grad():
        forward()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(repeats):
                forward()
            torch.cuda.synchronize()
    rows = []
    for event in prof.key_averages():
        time_us = float(getattr(event, "self_device_time_total", 0.0) or getattr(event, "self_cuda_time_total", 0.0))
        if time_us <= 0:
            continue
        match = next((name for name in own if names_kernel(event.key, name)), None)
        rows.append({"name": match or event.key, "time_us": time_us / repeats, "launches": event.count // repeats,
                     "own": match is not None})
    total = sum(r["time_us"] for r in rows) or 1.0
    for row in rows:
        row["share"] = row["time_us"] / total
    rows.sort(key=lambda r: -r["time_us"])
    return rows
