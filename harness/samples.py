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


ROUND_OUTLIER = 0.25  # a round whose median is this much above the middle of the side's round medians is left out


def pool(rounds: list[dict[str, Any]], minimum: int = 0) -> dict[str, Any]:
    """One side's timing from its rounds (each as `timing.measure` returns it): statistics over their samples.

    A round whose median is more than ROUND_OUTLIER above the median of the round medians is left out, while the
    rounds kept still hold `minimum` samples: on the H200 the first round of a new solution worker sometimes came out
    3-4x slow as a whole (17.4 and 19.5 us round medians against 4.8-5.0 us in the other rounds of the same checks,
    through a 50 ms warm-up), which moved a 5 us kernel's speedup by up to 3 %. Only slow rounds go (a side can only
    look slower for what is left in), the round medians are all reported, and so is how many were left out."""
    medians = [statistics.median(p["samples"]) for p in rounds]
    middle = statistics.median(medians)
    kept = [p for p, m in zip(rounds, medians) if m <= middle * (1 + ROUND_OUTLIER)]
    if sum(len(p["samples"]) for p in kept) < minimum:
        kept = rounds
    samples = [s for part in kept for s in part["samples"]]
    host = [s for part in kept for s in part["host_samples"]]
    stats = summary(samples)
    every = [s for part in rounds for s in part["samples"]]
    return {**stats, "trials": len(samples), "host_median_ms": statistics.median(host),
            "clock": rounds[0]["clock"], "overhead_ms": statistics.median(p["overhead_ms"] for p in rounds),
            "rounds": len(rounds), "round_medians_ms": tuple(medians), "rounds_left_out": len(rounds) - len(kept),
            "slow_fraction": sum(s > 2 * stats["median_ms"] for s in every) / len(every),
            "placements": min(p.get("placements", 1) for p in rounds)}


def timer_disagrees(timing: dict[str, Any], tolerance: float) -> bool:
    """Host time over a device-wide sync well above event time: work escaped the timed stream."""
    if timing.get("clock") != "cuda-events":
        return False
    host = timing["host_median_ms"] - timing.get("overhead_ms", 0.0)
    return host > timing["median_ms"] * (1 + tolerance) + 0.05
