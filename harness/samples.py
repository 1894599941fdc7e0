"""Timing samples pooled over rounds, how many trials each round gets, and what the caller's own clock allows.

No torch here: the caller plans the rounds, checks each round against its own clock and pools what the workers
measured, without importing it.
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass

# copies of the timed inputs at different addresses, taken in turn trial by trial (`timing.placements`); here, where
# the caller reads it without loading torch (`rounds.time_sides` agrees a first round's warm-up by it)
PLACEMENTS = 8


@dataclass(frozen=True)
class Summary:
    """Median, interquartile spread and extremes of some samples, in milliseconds."""

    median_ms: float
    spread_ms: float
    min_ms: float
    max_ms: float


def summary(samples: list[float] | tuple[float, ...]) -> Summary:
    ordered = sorted(samples)
    q = statistics.quantiles(ordered, n=4) if len(ordered) >= 2 else [ordered[0]] * 3
    return Summary(statistics.median(ordered), q[2] - q[0], ordered[0], ordered[-1])


@dataclass(frozen=True)
class TimedRound:
    """One round of one side's timing as its worker measured it (`timing.measure`): exactly the forwards agreed,
    every reading of the host clock it took (CLOCK_MONOTONIC seconds), so the caller can hold them to its own."""

    samples: tuple[float, ...]  # ms a timed call: CUDA events, the process's CPU time, or host time
    host_samples: tuple[float, ...]  # ms a timed call by the host clock (wall time)
    clock: str  # "cuda-events" | "cpu-time" | "host"
    overhead_ms: float = 0.0  # host time of an empty timed region (CUDA)
    placements: int = 1
    starts: tuple[float, ...] = ()  # each timed call's host-clock start
    loop_start: float = 0.0  # the host clock when the round began and ended (`outside_clock`)
    loop_end: float = 0.0

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples)


@dataclass(frozen=True)
class SideRound:
    """A round as the caller saw it: the worker's reading, the forwards agreed for its warm-up, and the CPU the
    kernel accounted to the worker's processes over the command (CPU checks; None elsewhere)."""

    timed: TimedRound
    warmup: int = 0
    outside_cpu_ms: float | None = None


@dataclass(frozen=True)
class Pooled:
    """One side's rounds pooled (`pool`)."""

    median_ms: float
    spread_ms: float
    min_ms: float
    max_ms: float
    trials: int
    host_median_ms: float
    clock: str
    overhead_ms: float
    rounds: int
    round_medians_ms: tuple[float, ...]
    rounds_left_out: int
    slow_fraction: float
    placements: int
    unsteady: bool  # the rounds kept still differ by more than ROUND_DISAGREE


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
# ... and by more than this many ms: a pair of CUDA events resolves about half a microsecond, and the round medians of
# a kernel of a few microseconds move by one or two with the GPU's clock alone (an idle H100 of 2026-12-07 flagged an
# honest 512x512 add as "another job is likely using this machine")
ROUND_DISAGREE_FLOOR_MS = 0.002
ROUND_POINTS = 100  # each round kept stands in the pooled samples as this many of its quantiles


def _points(samples: tuple[float, ...], count: int = ROUND_POINTS) -> list[float]:
    """`count` evenly spaced quantiles of `samples` (nearest rank): a round's distribution at a fixed weight."""
    ordered = sorted(samples)
    n = len(ordered)
    return [ordered[min(n - 1, int((i + 0.5) * n / count))] for i in range(count)]


def pool(rounds: list[TimedRound], minimum: int = 0) -> Pooled:
    """One side's timing from its rounds.

    Each round kept weighs the same: it stands in the pool as ROUND_POINTS of its quantiles, whatever its sample
    count, so a round that got more trials (a short forward in a quiet moment) does not outweigh the others.

    A round whose median is more than ROUND_OUTLIER above the median of the round medians is left out, while the
    rounds kept still hold `minimum` samples: on the H200 the first round of a new solution worker sometimes came out
    3-4x slow as a whole (17.4 and 19.5 us round medians against 4.8-5.0 us in the other rounds of the same checks,
    through a 50 ms warm-up), which moved a 5 us kernel's speedup by up to 3 %. Only slow rounds go (a side can only
    look slower for what is left in), the round medians are all reported, and so is how many were left out.
    `unsteady` says the rounds kept still differ by more than ROUND_DISAGREE: the machine was busy, most likely."""
    medians = [r.median_ms for r in rounds]
    middle = statistics.median(medians)
    kept = [r for r, m in zip(rounds, medians) if m <= middle * (1 + ROUND_OUTLIER)]
    if sum(len(r.samples) for r in kept) < minimum:
        kept = rounds
    pooled = [s for r in kept for s in _points(r.samples)]
    host = [s for r in kept for s in _points(r.host_samples)]
    stats = summary(pooled)
    every = [s for r in rounds for s in r.samples]
    kept_medians = [r.median_ms for r in kept]
    return Pooled(stats.median_ms, stats.spread_ms, stats.min_ms, stats.max_ms,
                  trials=sum(len(r.samples) for r in kept), host_median_ms=statistics.median(host),
                  clock=rounds[0].clock, overhead_ms=statistics.median(r.overhead_ms for r in rounds),
                  rounds=len(rounds), round_medians_ms=tuple(medians), rounds_left_out=len(rounds) - len(kept),
                  slow_fraction=sum(s > 2 * stats.median_ms for s in every) / len(every),
                  placements=min(r.placements for r in rounds),
                  unsteady=max(kept_medians) > max(min(kept_medians) * (1 + ROUND_DISAGREE),
                                                   min(kept_medians) + ROUND_DISAGREE_FLOOR_MS))


def timer_disagrees(pooled: Pooled, tolerance: float) -> bool:
    """Host time over a device-wide sync well above event time: work escaped the timed stream."""
    if pooled.clock != "cuda-events":
        return False
    return pooled.host_median_ms - pooled.overhead_ms > pooled.median_ms * (1 + tolerance) + 0.05


WALL_FACTOR, WALL_FLOOR_MS = 3.0, 1.0  # CPU checks: a round's wall median this far above its CPU median is flagged


def wall_exceeds_cpu(pooled: Pooled) -> bool:
    """With CPU-time samples (the whole process's, ended threads included): forward's wall time far above its CPU
    time. Another job on the cores stretches wall time too, so only by a wide margin: on the 2-core machine with a
    busy loop beside, the honest C++ loop's wall median came out within 2.2x of its CPU median."""
    return pooled.clock == "cpu-time" and pooled.host_median_ms > WALL_FACTOR * pooled.median_ms + WALL_FLOOR_MS


CLOCK_EPSILON_S = 1e-4  # readings of one clock in two processes: slack for the conversions only
# The CPU a solution's round leaves unexplained may be this many times eager's, plus the floor a call
GAP_FACTOR, GAP_FLOOR_MS = 3.0, 0.2


def outside_clock(timed: TimedRound, agreed: int, sent: float, received: float) -> list[str]:
    """What the caller's clock says against one round of the solution's timing: empty when they agree.

    The worker reads `time.perf_counter`, which is CLOCK_MONOTONIC, the same clock as the caller's: so every reading
    it reports must fall between the caller's send of the command and its receipt of the reply, in order, and the
    round must hold exactly the forwards agreed. A candidate that slows, offsets or replaces the worker's clock, or
    answers with numbers of its own, reports readings the caller's clock does not allow."""
    problems = []
    if len(timed.samples) != agreed or len(timed.starts) != agreed:
        problems.append(f"{len(timed.samples)} timed forwards reported, {agreed} agreed")
    first, last = timed.loop_start, timed.loop_end
    inside = [first, *timed.starts, last]
    if not sent - CLOCK_EPSILON_S <= first <= last <= received + CLOCK_EPSILON_S:
        problems.append(f"its clock read {first:.6f}-{last:.6f} s during a command the caller's clock saw run "
                        f"{sent:.6f}-{received:.6f} s")
    elif any(b < a - CLOCK_EPSILON_S for a, b in zip(inside, inside[1:])):
        problems.append("its readings go backwards")
    host = timed.samples if timed.clock == "host" else timed.host_samples  # wall time, as the span
    if sum(host) > (last - first) * 1e3 + CLOCK_EPSILON_S * 1e3:
        problems.append(f"its {len(host)} timed forwards add up to {sum(host):.3f} ms in a loop of "
                        f"{(last - first) * 1e3:.3f} ms")
    return problems


COMMAND_CPU_MS = 20.0  # CPU a solution round may use beyond eager's besides its calls: the seal, the census


def _unaccounted(side: SideRound) -> float:
    """CPU milliseconds the kernel accounted to a worker's processes during one round that its timed calls and
    warm-up (at most the warm-up forwards agreed, at the round's median) do not explain."""
    samples = side.timed.samples
    return (side.outside_cpu_ms or 0.0) - sum(samples) - side.warmup * side.timed.median_ms


def hidden_cpu(solution: list[SideRound], eager: list[SideRound]) -> str:
    """With CPU-time samples: CPU the kernel accounted to the solution's worker and every process below it
    (`outside_cpu_ms`, read by the caller from /proc) that its timed calls do not explain, against eager's on the
    same inputs. Work in a helper process, or a process clock that stops inside forward, shows here. Empty when
    they agree (or there is nothing to compare)."""
    ours = [s for s in solution if s.timed.clock == "cpu-time" and s.outside_cpu_ms is not None]
    theirs = [s for s in eager if s.timed.clock == "cpu-time" and s.outside_cpu_ms is not None]
    if not ours or not theirs:
        return ""
    calls = sum(len(s.timed.samples) for s in ours)
    # Each round on its own, none below zero: a first round whose warm-up forwards ran faster than its median (ten
    # warm-ups at eager's median of 9.8 ms under load: -40 ms) cancelled eager's later rounds, and an honest
    # solution's own bookkeeping (its fresh inputs and staged outputs, 1.7 ms a call under a memory-heavy job
    # beside) was held against nothing
    mine = sum(max(_unaccounted(s), 0.0) for s in ours)
    base = sum(max(_unaccounted(s), 0.0) for s in theirs) * calls / sum(len(s.timed.samples) for s in theirs)
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


_TICK_MS = 1000.0 / os.sysconf("SC_CLK_TCK")


def _ticks(stat: str) -> int:
    """utime + stime, in clock ticks, from a /proc stat line."""
    fields = stat.rsplit(")", 1)[-1].split()
    return int(fields[11]) + int(fields[12]) if len(fields) > 12 else 0


def process_cpu_ms(pid: int) -> float:
    """CPU milliseconds the kernel accounted to process `pid`, its ended threads included: each live thread's to
    the nanosecond (schedstat), and what the process's own count (clock ticks) holds beyond its live threads' counts,
    the threads that ended. A thread started and joined inside one call ends before any census can see it."""
    live_ns, live_ticks = 0, 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for tid in tids:
        fields = proc_text(f"/proc/{pid}/task/{tid}/schedstat").split()
        live_ns += int(fields[0]) if fields else 0
        live_ticks += _ticks(proc_text(f"/proc/{pid}/task/{tid}/stat"))
    ended = max(0, _ticks(proc_text(f"/proc/{pid}/stat")) - live_ticks)
    return live_ns / 1e6 + ended * _TICK_MS


def tree_cpu_ms(root: int) -> float:
    """CPU milliseconds the kernel has accounted to process `root` and every live process below it, ended threads
    included (`process_cpu_ms`): the caller's own account of a worker's CPU, which nothing in the worker can
    change."""
    return sum(process_cpu_ms(pid) for pid in [root, *descendants(root)])
