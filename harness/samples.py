"""Timing samples pooled over rounds, how many trials each round gets, and what the caller's own clock allows.

No torch here: the caller plans the rounds, checks each round against its own clock and pools what the workers
measured, without importing it.
"""

from __future__ import annotations

import math
import os
import statistics
from typing import Any

# copies of the timed inputs at different addresses, taken in turn trial by trial (`timing.placements`); here, where
# the caller reads it without loading torch (`rounds.time_sides` agrees a first round's warm-up by it)
PLACEMENTS = 8


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    q = statistics.quantiles(ordered, n=4) if len(ordered) >= 2 else [ordered[0]] * 3
    return {"median_ms": statistics.median(ordered), "spread_ms": q[2] - q[0], "min_ms": ordered[0],
            "max_ms": ordered[-1]}


MIN_ROUND_TRIALS = 3  # a round capped by the time cap still times this many forwards


def round_trials(trials: int, rounds: int, budget_s: float, median_ms: float | None, cap_s: float = 0.0,
                 estimate_ms: float | None = None) -> int:
    """How many timed forwards the next round of one side gets, agreed before it runs (the caller checks the count):
    the round's share of `trials`, and for a short forward more, up to ten times that, while the round's share of
    `budget_s` lasts at the median measured so far (None: the side's first round, which gets the share alone).

    A long forward gets fewer: with `cap_s`, a side's rounds together time at most about that many seconds, at the
    median so far or, in the first round, at `estimate_ms` (an upper bound: the verify stage's seconds per forward),
    never fewer than MIN_ROUND_TRIALS a round. KernelBench's 100 trials of a 1 s forward, on each side, in every
    re-check, would keep an editor waiting minutes for a number 10 trials give as well."""
    share = max(1, -(-trials // max(rounds, 1)))
    count = share
    if median_ms and median_ms > 0:
        wanted = math.ceil(budget_s / max(rounds, 1) * 1e3 / median_ms)
        count = max(share, min(10 * share, wanted))
    pace = median_ms if median_ms and median_ms > 0 else estimate_ms
    if cap_s > 0 and pace and pace > 0:
        count = min(count, max(MIN_ROUND_TRIALS, math.floor(cap_s / max(rounds, 1) * 1e3 / pace)))
    return count


ROUND_OUTLIER = 0.25  # a round whose median is this much above the middle of the side's round medians is left out
ROUND_DISAGREE = 0.25  # rounds kept whose medians differ by more than this (fastest to slowest) make a warning
ROUND_POINTS = 100  # each round kept stands in the pooled samples as this many of its quantiles


def _points(samples: list[float], count: int = ROUND_POINTS) -> list[float]:
    """`count` evenly spaced quantiles of `samples` (nearest rank): a round's distribution at a fixed weight."""
    ordered = sorted(samples)
    n = len(ordered)
    return [ordered[min(n - 1, int((i + 0.5) * n / count))] for i in range(count)]


def pool(rounds: list[dict[str, Any]], minimum: int = 0) -> dict[str, Any]:
    """One side's timing from its rounds (each as `timing.measure` returns it).

    Each round kept weighs the same: it stands in the pool as ROUND_POINTS of its quantiles, whatever its sample
    count, so a round that got more trials (a short forward in a quiet moment) does not outweigh the others.

    A round whose median is more than ROUND_OUTLIER above the median of the round medians is left out, while the
    rounds kept still hold `minimum` samples: on the H200 the first round of a new solution worker sometimes came out
    3-4x slow as a whole (17.4 and 19.5 us round medians against 4.8-5.0 us in the other rounds of the same checks,
    through a 50 ms warm-up), which moved a 5 us kernel's speedup by up to 3 %. Only slow rounds go (a side can only
    look slower for what is left in), the round medians are all reported, and so is how many were left out.
    `disagree` says the rounds kept still differ by more than ROUND_DISAGREE: the machine was busy, most likely."""
    medians = [statistics.median(p["samples"]) for p in rounds]
    middle = statistics.median(medians)
    kept = [p for p, m in zip(rounds, medians) if m <= middle * (1 + ROUND_OUTLIER)]
    if sum(len(p["samples"]) for p in kept) < minimum:
        kept = rounds
    pooled = [s for part in kept for s in _points(part["samples"])]
    host = [s for part in kept for s in _points(part["host_samples"])]
    stats = summary(pooled)
    every = [s for part in rounds for s in part["samples"]]
    kept_medians = [statistics.median(p["samples"]) for p in kept]
    return {**stats, "trials": sum(len(p["samples"]) for p in kept), "host_median_ms": statistics.median(host),
            "clock": rounds[0]["clock"], "overhead_ms": statistics.median(p["overhead_ms"] for p in rounds),
            "rounds": len(rounds), "round_medians_ms": tuple(medians), "rounds_left_out": len(rounds) - len(kept),
            "slow_fraction": sum(s > 2 * stats["median_ms"] for s in every) / len(every),
            "placements": min(p.get("placements", 1) for p in rounds),
            "disagree": max(kept_medians) > min(kept_medians) * (1 + ROUND_DISAGREE)}


def timer_disagrees(timing: dict[str, Any], tolerance: float) -> bool:
    """Host time over a device-wide sync well above event time: work escaped the timed stream."""
    if timing.get("clock") != "cuda-events":
        return False
    host = timing["host_median_ms"] - timing.get("overhead_ms", 0.0)
    return host > timing["median_ms"] * (1 + tolerance) + 0.05


CLOCK_EPSILON_S = 1e-4  # readings of one clock in two processes: slack for the conversions only
GAP_FACTOR, GAP_FLOOR_MS = 3.0, 0.2  # a solution's median time between timed calls may be this much over eager's


def outside_clock(part: dict[str, Any], agreed: int, sent: float, received: float) -> list[str]:
    """What the caller's clock says against one round of the solution's timing: empty when they agree.

    The worker reads `time.perf_counter`, which is CLOCK_MONOTONIC, the same clock as the caller's: so every reading
    it reports must fall between the caller's send of the command and its receipt of the reply, in order, and the
    round must hold exactly the forwards agreed. A candidate that slows, offsets or replaces the worker's clock, or
    answers with numbers of its own, reports readings the caller's clock does not allow."""
    problems = []
    starts, samples = list(part.get("starts", ())), list(part["samples"])
    if len(samples) != agreed or len(starts) != agreed:
        problems.append(f"{len(samples)} timed forwards reported, {agreed} agreed")
    first, last = part.get("loop_start", 0.0), part.get("loop_end", 0.0)
    inside = [first, *starts, last]
    if not sent - CLOCK_EPSILON_S <= first <= last <= received + CLOCK_EPSILON_S:
        problems.append(f"its clock read {first:.6f}-{last:.6f} s during a command the caller's clock saw run "
                        f"{sent:.6f}-{received:.6f} s")
    elif any(b < a - CLOCK_EPSILON_S for a, b in zip(inside, inside[1:])):
        problems.append("its readings go backwards")
    host = samples if part.get("clock") == "host" else part.get("host_samples", samples)  # wall time, as the span
    if sum(host) > (last - first) * 1e3 + CLOCK_EPSILON_S * 1e3:
        problems.append(f"its {len(host)} timed forwards add up to {sum(host):.3f} ms in a loop of "
                        f"{(last - first) * 1e3:.3f} ms")
    return problems


def gaps_ms(part: dict[str, Any]) -> list[float]:
    """The wall time between one timed call's end and the next one's start, from a round's own readings."""
    starts, walls = part.get("starts", ()), part.get("host_samples", part["samples"])
    return [(b - a) * 1e3 - s for a, b, s in zip(starts, starts[1:], walls)]


def _low(values: list[float]) -> float:
    """The first quartile: a gap that a busy machine stretched now and then does not move it."""
    ordered = sorted(values)
    return ordered[len(ordered) // 4]


def hidden_time(solution: list[dict[str, Any]], eager: list[dict[str, Any]]) -> str:
    """On the CPU, time the solution's readings leave between its timed calls, against eager's on the same inputs:
    a clock that stops inside forward and catches up after it keeps the loop's span right, and moves forward's time
    into the gaps (every gap, so the first quartile shows it). Empty when they agree (or there is nothing to
    compare)."""
    if not solution or not eager or solution[0].get("clock") == "cuda-events":
        return ""
    ours = [g for part in solution for g in gaps_ms(part)]
    theirs = [g for part in eager for g in gaps_ms(part)]
    if not ours or not theirs:
        return ""
    mine, base = _low(ours), _low(theirs)
    if mine <= GAP_FACTOR * base + GAP_FLOOR_MS:
        return ""
    return (f"between its timed calls its clock shows {mine:.3f} ms (first quartile), eager's {base:.3f} ms on the "
            "same inputs: forward's time is hidden between the readings")


COMMAND_CPU_MS = 20.0  # CPU a solution round may use beyond eager's besides its calls: the seal, the census


def _unaccounted(part: dict[str, Any]) -> float:
    """CPU milliseconds the kernel accounted to a worker's processes during one round that its timed calls and
    warm-up (at most the warm-up forwards agreed, at the round's median) do not explain."""
    samples = part["samples"]
    return part["outside_cpu_ms"] - sum(samples) - part.get("warmup", 0) * summary(samples)["median_ms"]


def hidden_cpu(solution: list[dict[str, Any]], eager: list[dict[str, Any]]) -> str:
    """With CPU-time samples: CPU the kernel accounted to the solution's worker and every process below it
    (`outside_cpu_ms`, read by the caller from /proc) that its timed calls do not explain, against eager's on the
    same inputs. Work in a helper process, or a process clock that stops inside forward, shows here. Empty when
    they agree (or there is nothing to compare)."""
    ours = [p for p in solution if p.get("clock") == "cpu-time" and "outside_cpu_ms" in p]
    theirs = [p for p in eager if p.get("clock") == "cpu-time" and "outside_cpu_ms" in p]
    if not ours or not theirs:
        return ""
    calls = sum(len(p["samples"]) for p in ours)
    # Each round on its own, none below zero: a first round whose warm-up forwards ran faster than its median (ten
    # warm-ups at eager's median of 9.8 ms under load: -40 ms) cancelled eager's later rounds, and an honest
    # solution's own bookkeeping (its fresh inputs and kept outputs, 1.7 ms a call under a memory-heavy job beside)
    # was held against nothing
    mine = sum(max(_unaccounted(p), 0.0) for p in ours)
    base = sum(max(_unaccounted(p), 0.0) for p in theirs) * calls / sum(len(p["samples"]) for p in theirs)
    if mine <= GAP_FACTOR * base + calls * GAP_FLOOR_MS + len(ours) * COMMAND_CPU_MS:
        return ""
    return (f"its processes used {mine:.1f} ms of CPU the kernel counted and its {calls} timed calls do not explain "
            f"(eager's, for as many calls: {base:.1f} ms): work outside the timed calls or outside its clock")


def proc_text(path: str) -> str:
    """A /proc file's text (NULs as spaces), or "" when the process is gone."""
    try:
        with open(path, "rb") as file:
            return file.read(4096).replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def descendants(root: int) -> list[int]:
    """The live processes below `root` (zombies left out), from /proc."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = proc_text(f"/proc/{entry}/stat").rsplit(")", 1)[-1].split()
            if len(fields) >= 2 and fields[0] not in ("Z", "X"):
                parents[int(entry)] = int(fields[1])
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in found]
        found += children
        frontier += children
    return found


def tree_cpu_ms(root: int) -> float:
    """CPU milliseconds the kernel has accounted (schedstat) to the live threads of process `root` and of every
    live process below it: the caller's own account of a worker's CPU, which nothing in the worker can change."""
    total = 0
    for pid in [root, *descendants(root)]:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            fields = proc_text(f"/proc/{pid}/task/{tid}/schedstat").split()
            total += int(fields[0]) if fields else 0
    return total / 1e6
