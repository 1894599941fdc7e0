"""Timing samples pooled over rounds: median, spread and the host-clock cross-check of one side's forward.

No torch here: the caller pools what the workers measured, round by round, without importing it.
"""

from __future__ import annotations

import statistics
from typing import Any


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    q = statistics.quantiles(ordered, n=4) if len(ordered) >= 2 else [ordered[0]] * 3
    return {"median_ms": statistics.median(ordered), "spread_ms": q[2] - q[0], "min_ms": ordered[0],
            "max_ms": ordered[-1]}


def pool(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One side's timing from its rounds (each as `timing.measure` returns it): statistics over every sample."""
    samples = [s for part in rounds for s in part["samples"]]
    host = [s for part in rounds for s in part["host_samples"]]
    stats = summary(samples)
    return {**stats, "trials": len(samples), "host_median_ms": statistics.median(host),
            "clock": rounds[0]["clock"], "overhead_ms": statistics.median(p["overhead_ms"] for p in rounds),
            "rounds": len(rounds), "round_medians_ms": tuple(statistics.median(p["samples"]) for p in rounds),
            "slow_fraction": sum(s > 2 * stats["median_ms"] for s in samples) / len(samples),
            "placements": min(p.get("placements", 1) for p in rounds)}


def timer_disagrees(timing: dict[str, Any], tolerance: float) -> bool:
    """Host time over a device-wide sync well above event time: work escaped the timed stream."""
    if timing.get("clock") != "cuda-events":
        return False
    host = timing["host_median_ms"] - timing.get("overhead_ms", 0.0)
    return host > timing["median_ms"] * (1 + tolerance) + 0.05
