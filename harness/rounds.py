"""The time stage seen from the caller: rounds with the forwards agreed in advance, every side's round watched (the
caller draws each timed call's inputs and answers the call's end with the next draw), the solution's readings held
to the caller's own clock, the sides pooled, and afterwards the timed calls the caller kept compared with the
reference's outputs on the same inputs.

Nothing the verdict rests on lives in the solution's process (docs/THREATS.md of this repository says why): the
record of each call's inputs is the caller's; which calls are compared is drawn here after each call ended, and a
kept call's outputs are copied out of the worker's reach (by this process on the CPU, by the reference worker on a
GPU) before the worker learns anything of it; the CPU clock counts the whole process, ended threads included.
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from dice_lsp.anatomy.types import Finding, Span

from dice_lsp.harness import findings, handover, samples
from dice_lsp.harness.errors import HarnessError
from dice_lsp.harness.messages import (Called, CompareTimed, Compared, Failed, Next, Reply, Snapshot, Time, Timed,
                                       TimedCall)
from dice_lsp.harness.options import Options
from dice_lsp.harness.pool import WorkerPool
from dice_lsp.harness.process import Worker
from dice_lsp.harness.record import Record
from dice_lsp.harness.report import Timing
from dice_lsp.harness.samples import Pooled, SideRound


def cpu_threads(options: Options) -> int:
    """The intra-op threads both sides are timed with on a CPU (the same for both). With every core busy, an
    operator split over all of them waits for its slowest thread: one eager op on the 2-core machine took
    0.06-0.13 ms in one run and 20-44 ms in another while another job ran. With one thread (the default) the
    samples are CPU time (`timing.cpu_seconds`), which another job on the cores does not stretch."""
    return max(1, options.timing_threads)


@dataclass
class Side:
    """One timed side: who runs it, and what its rounds gave."""

    name: str  # "eager", "solution", "compile"
    worker: Worker
    compiled: bool = False
    rounds: list[SideRound] = field(default_factory=list)
    failed: bool = False


@dataclass
class Watched:
    """One watched round's answer, and the calls the caller kept of it."""

    reply: Reply
    kept: list[TimedCall] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class TimeStage:
    """The time stage of one check. `run` times every side; `send_comparison` then has the reference worker compare
    the kept calls (its answer is read by `finish`, so the inspect stage can run meanwhile)."""

    def __init__(self, record: Record, options: Options, pool: WorkerPool, cancel: threading.Event, span: Span,
                 token: str, exchange: str, bases: int) -> None:
        self.record, self.options, self.pool, self.cancel, self.span = record, options, pool, cancel, span
        self.token, self.exchange, self.bases = token, exchange, max(1, bases)
        self.kept: list[TimedCall] = []
        self.clock: list[str] = []  # what the caller's clock says against the solution's readings
        self.seen: dict[str, list[str]] = {"lazy": [], "threads": [], "tampered": []}
        self.awaiting = False  # the reference worker owes its comparison of the kept calls
        self.draws = secrets.SystemRandom()

    def run(self, reference: Worker, solution: Worker) -> str:
        """Time every side; "" when the solution was timed, else the error it raised while timed (the caller
        reports the crash). The sides take turns over `timing_rounds` rounds, in alternating order, and each side's
        rounds are pooled (each weighing the same): on the H200 the eager and solution medians of one microsecond
        kernel, timed one after the other, gave speedups from 0.53x to 1.99x over five re-checks, the GPU clock
        ramping between the two. Each round's count of timed forwards is fixed here before it runs."""
        options, started = self.options, time.perf_counter()
        sides = [Side("eager", reference)] if options.baseline in ("eager", "both") else []
        sides.append(Side("solution", solution))
        if options.baseline in ("compile", "both"):
            sides.append(Side("compile", reference, compiled=True))
        estimate = self._estimate_ms()
        with self.pool.quiet():  # no spare warms up beside a timed forward
            for turn in range(max(1, options.timing_rounds)):
                for side in sides if turn % 2 == 0 else sides[::-1]:
                    if side.failed:
                        continue
                    error = self._round(side, turn, solution, reference, estimate)
                    if error:
                        self.record.stage("time", started, "failed", error)
                        return error
        self._findings(sides)
        self._speedups({s.name: samples.pool([r.timed for r in s.rounds], options.timing_trials)
                        for s in sides if s.rounds and not s.failed})
        if not self.record.ran("time"):
            self.record.stage("time", started, detail=capped(self.record.timings, options))
        return ""

    def _estimate_ms(self) -> float | None:
        """An upper bound on one forward's time before any round ran: the verify stage's seconds (the solution's
        trials, one forward each plus making their inputs, and the comparison) per forward it ran."""
        verify = next((s for s in self.record.stages if s.name == "verify"), None)
        if verify is None or verify.seconds <= 0:
            return None
        return verify.seconds * 1e3 / (self.options.correctness_trials + 1)

    def _round(self, side: Side, turn: int, solution: Worker, reference: Worker, estimate: float | None) -> str:
        """One round of one side; the error message when the solution raised while timed, else ""."""
        options, cpu = self.options, not self.record.cuda
        ours = side.name == "solution"
        # Later rounds follow other sides' forwards on a GPU at full clock: one forward, or a quarter of the first
        # round's warm-up time, brings the side back. On the CPU a first round warms every placement of the inputs
        # twice (`timing.measure`); the warm-up forwards agreed are what its CPU may spend beyond the timed calls
        warmup = (max(options.warmup_trials, 2 * samples.PLACEMENTS) if cpu else options.warmup_trials) \
            if turn == 0 else 1
        so_far = [r.timed.median_ms for r in side.rounds]
        trials = samples.round_trials(options.timing_trials, options.timing_rounds, options.timing_budget_s,
                                      min(so_far) if so_far else None, options.timing_cap_s, estimate)
        command = Time(compiled=side.compiled, trials=trials, warmup=warmup,
                       warm_s=options.warmup_s if turn == 0 else options.warmup_s / 4, round=turn, check=self.token,
                       watch=True, staging=f"{side.worker.inner_scratch}/{handover.STAGED}",
                       threads=cpu_threads(options) if cpu else 0)
        if not ours:
            solution.pause()  # nothing of the candidate's runs beside another side's timed forwards
        try:
            cpu_before = samples.tree_cpu_ms(side.worker.pid) if cpu else 0.0
            sent = time.perf_counter()
            watched = self._watched(side.worker, command, turn, reference if ours else None)
            received = time.perf_counter()
            outside = samples.tree_cpu_ms(side.worker.pid) - cpu_before if cpu else None
        finally:
            if not ours:
                solution.resume()
        answer = watched.reply
        if isinstance(answer, Failed):
            if ours:
                self.record.findings.append(Finding("crash", f"forward raised {answer.error} while timed", self.span,
                                                    "error"))
                return answer.error
            self.record.stage("time", time.perf_counter(), "failed", f"{side.name}: {answer.error}")
            side.failed = True
            return ""
        assert isinstance(answer, Timed)
        side.rounds.append(SideRound(answer.timing, warmup, outside))
        if ours:
            self.clock += watched.problems + samples.outside_clock(answer.timing, trials, sent, received)
            self.kept += watched.kept
            for key in self.seen:
                self.seen[key] += [answer.lazy] if key == "lazy" else list(getattr(answer, key))
        return ""

    def _watched(self, worker: Worker, command: Time, turn: int, reference: Worker | None) -> Watched:
        """Send one watched Time and answer each timed call's end with the next call's inputs: drawn here, and kept
        here too. With `reference` (the solution's rounds), a reservoir of `timed_checks` calls is kept, each call as
        likely as any other, decided after the call ended; a kept call's staged outputs are copied before the
        worker is answered."""
        slots = self.options.timed_checks if reference is not None else 0
        worker.send(command)
        watched, draw, expected, staging = Watched(Reply()), self._draw(), -1, ()
        kept: dict[int, TimedCall] = {}
        while True:
            reply = worker.receive(self.options.run_timeout, self.cancel, "time")
            if not isinstance(reply, Called):
                watched.reply, watched.kept = reply, list(kept.values())
                return watched
            if reply.index != expected:
                watched.problems.append(f"it said call {reply.index} ended where call {expected} was due")
            expected = reply.index + 1
            staging = reply.staging or staging
            if reply.index >= 0 and slots and not reply.lazy:
                slot = reply.index if reply.index < slots else self.draws.randrange(reply.index + 1)
                if slot < slots:
                    where = turn * slots + slot
                    problem = self._take(worker, reference, reply, where, staging)
                    if problem:
                        watched.problems.append(f"timed call {reply.index}: {problem}")
                    else:
                        staging = ()  # opened by the reference worker with this copy
                        kept[slot] = TimedCall(turn, reply.index, draw.first, draw.second, draw.seed, where,
                                               reply.outputs)
            draw = self._draw()
            worker.answer(draw)

    def _draw(self) -> Next:
        """A timed call's inputs: two trials' inputs (different ones where there are two), and the seed of their
        lerp weights (`timing.weights`)."""
        first = self.draws.randrange(self.bases)
        second = (first + 1 + self.draws.randrange(self.bases - 1)) % self.bases if self.bases > 1 else first
        return Next(first=first, second=second, seed=self.draws.getrandbits(63))

    def _take(self, solution: Worker, reference: Worker, called: Called, slot: int,
              staging: tuple[dict, ...]) -> str:
        """A copy of the staged outputs of the call that just ended, out of the solution's reach: "" when taken."""
        size = sum(-(-_elements(o.shape) * _itemsize(o.dtype) // 64) * 64 for o in called.outputs)
        if not self.record.cuda:
            return handover.take_staged(solution, size, Path(self.exchange) / f"timed-{slot}.bin")
        if staging:
            handover.hand_shared(solution, reference)
        answer = reference.call(Snapshot(slot=slot, outputs=called.outputs, staging=staging),
                                self.options.run_timeout, self.cancel, "time")
        return answer.error if isinstance(answer, Failed) else ""

    def _findings(self, sides: list[Side]) -> None:
        rounds = {s.name: s.rounds for s in sides}
        # On the CPU, the caller's own account of the worker's CPU: a clock that stops inside forward (or work done
        # outside the timed calls) leaves CPU its samples do not explain. (The time between timed calls, once held
        # against eager's too, now holds the caller's answer to each call, which its scheduling stretches)
        hidden = samples.hidden_cpu(rounds.get("solution", []), rounds.get("eager", []))
        if hidden:
            self.clock.append(hidden)
        if self.clock:
            self.record.findings.append(findings.outside_clock(self.clock, self.span))
        tampered = list(dict.fromkeys(self.seen["tampered"]))
        if tampered and not any(f.code == "timer-patch" and "changed the harness" in f.message
                                for f in self.record.findings):
            self.record.findings.append(findings.tampered(tampered, self.span))
        lazy = next((why for why in self.seen["lazy"] if why), "")
        if lazy and not any(f.code == findings.LAZY_OUTPUT for f in self.record.findings):
            self.record.findings.append(findings.lazy(lazy, self.span))
        threads = list(dict.fromkeys(self.seen["threads"]))
        if threads:
            self.record.findings.append(findings.threads(threads, self.span))

    def _speedups(self, pooled: dict[str, Pooled]) -> None:
        record, options = self.record, self.options
        escaped = False
        for name, side in pooled.items():
            if side.unsteady:
                record.findings.append(findings.unstable_rounds(name, side.round_medians_ms, self.span))
            escaped = escaped or samples.timer_disagrees(side, options.timer_tolerance)
        record.timings = {name: timing_of(side) for name, side in pooled.items()}
        solution = pooled.get("solution")
        if solution is not None and samples.timer_disagrees(solution, options.timer_tolerance):
            record.findings.append(findings.timer_mismatch(solution, self.span))
        if solution is not None and samples.wall_exceeds_cpu(solution):
            record.findings.append(findings.wall_time(solution, self.span))
        if faked(record) or solution is None:
            return
        solution_ms = solution.host_median_ms if escaped else solution.median_ms
        for name in ("eager", "compile"):
            if name in pooled and solution_ms:
                theirs = pooled[name].host_median_ms if escaped else pooled[name].median_ms
                setattr(record, f"speedup_{name}", theirs / solution_ms)

    def send_comparison(self, reference: Worker) -> None:
        """Have the reference worker compare the kept calls' outputs with its own on the same inputs (the caller's
        record of them); its answer is read by `finish`."""
        if not self.kept:
            return
        reference.send(CompareTimed(exchange=self.exchange, calls=tuple(self.kept)))
        self.awaiting = True

    def finish(self, reference: Worker) -> list[Finding]:
        """The reference's comparison of the kept calls (nothing when none was sent)."""
        if not self.awaiting:
            return []
        self.awaiting = False
        compared = reference.receive(self.options.run_timeout, self.cancel, "time")
        if isinstance(compared, Failed):
            reference.kill()  # its state is unknown now: never kept for another check
            raise HarnessError(f"comparing the timed calls failed: {compared.error}", "died", compared.traceback)
        assert isinstance(compared, Compared)
        timing = self.record.timings.get("solution")
        if timing is not None:
            self.record.timings["solution"] = dataclasses.replace(timing, checked=len(compared.trials))
        return findings.timed_calls(compared.trials, self.kept, self.span)


def _elements(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2, "int8": 1,
            "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16, "float8_e4m3fn": 1, "float8_e5m2": 1}


def _itemsize(dtype: str) -> int:
    """Bytes an element of torch's dtype `dtype` takes (the caller reads layouts without loading torch)."""
    if dtype not in ITEMSIZE:
        raise HarnessError(f"the solution staged an output of dtype {dtype!r}, which the harness does not know",
                           "died")
    return ITEMSIZE[dtype]


def timing_of(pooled: Pooled) -> Timing:
    return Timing(median_ms=pooled.median_ms, spread_ms=pooled.spread_ms, min_ms=pooled.min_ms,
                  max_ms=pooled.max_ms, trials=pooled.trials, host_median_ms=pooled.host_median_ms,
                  clock=pooled.clock, round_medians_ms=pooled.round_medians_ms,
                  rounds_left_out=pooled.rounds_left_out, slow_fraction=pooled.slow_fraction,
                  placements=pooled.placements)


def capped(timings: dict[str, Timing], options: Options) -> str:
    """The time stage's note when the time cap cut a side's trials below `timing_trials`."""
    short = {name: t.trials for name, t in timings.items() if t.trials < options.timing_trials}
    if not short:
        return ""
    counts = ", ".join(f"{name} {count}" for name, count in short.items())
    return (f"long forwards: timed forwards capped near {options.timing_cap_s:g} s a side ({counts}, "
            f"not {options.timing_trials})")


def faked(record: Record) -> bool:
    """An error finding that says the timing cannot be trusted: no speedup is given."""
    return any(f.code in findings.TIMING_ERRORS and f.severity == "error" for f in record.findings)
