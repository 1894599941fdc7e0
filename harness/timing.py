"""Time stage: warm-up, an L2 flush before each trial, CUDA events per trial and host time over a device-wide sync;
on the CPU the whole process's CPU time. In a watched round each timed call's inputs are the caller's draw and its
outputs are staged where the caller (CPU) or the reference worker (GPU) takes a copy before the next call begins:
which calls are compared with the reference is decided outside this process, after each call's outputs left it.

The clocks and the functions that stage outputs are bound when this module is imported, before any candidate code
runs in the worker.
"""

from __future__ import annotations

import collections
import math
import os
import resource
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from dice_lsp.harness import runtime
from dice_lsp.harness import verify
from dice_lsp.harness.samples import PLACEMENTS, TimedRound

_perf_counter = time.perf_counter
_getrusage = resource.getrusage
_waitpid = os.waitpid
_from_file = torch.from_file
_empty = torch.empty
_narrow = torch.Tensor.narrow
_view = torch.Tensor.view
_copy = torch.Tensor.copy_
_function_modes = getattr(torch._C, "_len_torch_function_stack", lambda: 0)
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 0)
_Event = torch.cuda.Event
_record = torch.cuda.Event.record
_elapsed = torch.cuda.Event.elapsed_time
_synchronize = torch.cuda.synchronize
_sleep = torch.cuda._sleep
COVER_CAP_MS = 5.0  # longest GPU wait queued before a trial's start event (see `measure`)
WARM_QUEUE_S = 0.01  # warm-up forwards queued at once: at most `warmup`, and no more than this much GPU time
PLACEMENT_BYTES = 64 << 20  # what those copies together, and the outputs held back, may take of the GPU's memory


def placements(inputs: list[Any], device: torch.device) -> list[list[Any]]:
    """The timed inputs (on `device` already) and up to PLACEMENTS - 1 copies of them in other allocations.

    A microsecond kernel's time depends on where its buffers lie: on the H200 one kept reference worker's eager
    median alternated between 4.80 and 5.06 us from one check to the next (two allocations, taken in turn), while
    its rounds within a check agreed to 0.01 us. Timing each trial on the next copy (and holding the last outputs
    back, so they land in different blocks too) pools the placements into every check's median instead of drawing
    one per check. Copies only while they are small: a forward over large inputs does not notice."""
    size = sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor))
    count = max(1, min(PLACEMENTS, PLACEMENT_BYTES // max(size, 1)))
    return [inputs] + [[t.clone() if isinstance(t, torch.Tensor) else t for t in inputs] for _ in range(count - 1)]


def _cpu_aside() -> float:
    """CPU seconds of this process's ended children (reaped here first: this process is their subreaper,
    `runtime.baseline`)."""
    try:
        while _waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
    children = _getrusage(resource.RUSAGE_CHILDREN)
    return children.ru_utime + children.ru_stime


def cpu_seconds() -> float:
    """The CPU time of this whole process, its ended threads included, and of the children it waited for
    (`_cpu_aside`): another job on the cores does not stretch it, as it does wall time. getrusage's own sum is exact
    for the calling thread and for every thread that ended (a thread started and joined inside a call is counted;
    the calling thread's clock alone missed it, and a forward that ran its loop on one looked 40 times faster) and
    within a scheduler tick for other live threads. Not the process clock (time.process_time): with a CPU-time limit
    set, as every worker has, the kernel reads it from a per-process sum kept up only at scheduler ticks, and a
    50 us op came out as 0. Idle intra-op threads that spin after a parallel region would count here: workers run
    with OMP_WAIT_POLICY=PASSIVE (`process.worker_environment`), so they sleep instead."""
    own = _getrusage(resource.RUSAGE_SELF)
    return _cpu_aside() + own.ru_utime + own.ru_stime


def weights(seed: int, count: int) -> tuple[float, ...]:
    """`count` lerp weights in [0.25, 0.75) from `seed` (splitmix64, in plain integer arithmetic: nothing here for
    a candidate to rebind), each exact in float32 (a multiple of 2^-20), so both workers mix the same values."""
    found, state = [], seed & 0xFFFFFFFFFFFFFFFF
    for _ in range(count):
        state = (state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        z ^= z >> 31
        found.append(0.25 + (z >> 45) / (1 << 20))
    return tuple(found)


def mix(first: list[Any], second: list[Any], weights: Sequence[float], out: list[Any] | None = None) -> list[Any]:
    """One timed call's inputs from two trials' inputs: each floating tensor `lerp(first, second, weight)`
    (weights in order, one per floating tensor), everything else as in `first`. A lerp keeps what a problem's inputs
    promise that is convex (ranges such as [0, 1), signs, symmetry, triangles, rows that sum to one, positive
    definiteness), unlike noise; with `out` (tensors of the same shapes) the values are written into it in place."""
    mixed, floats = [], iter(weights)
    for index, (a, b) in enumerate(zip(first, second)):
        target = out[index] if out is not None else None
        if isinstance(a, torch.Tensor) and a.is_floating_point() and isinstance(b, torch.Tensor):
            weight = next(floats, 0.5)
            if target is None:
                mixed.append(torch.lerp(a, b, weight))
            else:
                torch.lerp(a, b, weight, out=target)
                mixed.append(target)
        elif isinstance(a, torch.Tensor) and isinstance(target, torch.Tensor):
            target.copy_(a)
            mixed.append(target)
        else:
            mixed.append(a)
            if out is not None:
                out[index] = a
    return mixed


def _floating(inputs: list[Any]) -> int:
    return sum(isinstance(t, torch.Tensor) and t.is_floating_point() for t in inputs)


def call_inputs(bases: list[list[Any]], first: int, second: int, weights: Sequence[float],
                out: list[Any] | None = None) -> list[Any]:
    """The inputs of the timed call described by (first, second, weights) (`FreshInputs`): into `out` when given;
    the reference worker makes them again, from the same trials' inputs, to compare that call's outputs."""
    if first == second:  # one trial only: a second base of the same values, scaled, still gives values never seen
        other = [t * 0.5 if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in bases[first]]
        return mix(bases[first], other, weights, out)
    return mix(bases[first], bases[second], weights, out)


def floating(inputs: list[Any]) -> int:
    """How many of `inputs` are floating tensors: one lerp weight each."""
    return _floating(inputs)


@dataclass(frozen=True)
class Draw:
    """One timed call's inputs, as the caller drew them: a mix of trials `first` and `second`, with the weights of
    `seed` (`weights`). The caller keeps the record; the worker only applies it."""

    first: int
    second: int
    seed: int


ALIGN = 64  # each staged output begins at a multiple of this many bytes


def layout(outputs: list[torch.Tensor]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The staged outputs' dtypes and shapes, in order (the reference worker reads them back by it)."""
    return tuple((str(t.dtype).removeprefix("torch."), tuple(t.shape)) for t in outputs)


def staged_bytes(described: Sequence[tuple[str, Sequence[int]]]) -> int:
    """The bytes staged outputs of this layout take, each aligned to ALIGN."""
    total = 0
    for dtype, shape in described:
        total += -(-math.prod(shape) * getattr(torch, dtype).itemsize // ALIGN) * ALIGN
    return total


class Staging:
    """Where a watched call's outputs are written for the harness to take them before the next call begins: a file
    the caller reads on the CPU (mapped shared, so the write is the file's), a GPU buffer the reference worker opens
    by CUDA IPC on a GPU. Written with functions bound at import (`_copy`, `_view`, `_narrow`): a candidate that
    patches torch.Tensor's methods (the clone it once used to compute an answer only when it was copied) reaches
    none of them."""

    def __init__(self, path: str, device: torch.device) -> None:
        self.path, self.device = path, device
        self.buffer: torch.Tensor | None = None
        self.fresh = False  # a new GPU buffer: the reference worker must open it before it takes a copy

    def write(self, outputs: list[torch.Tensor]) -> int:
        size = staged_bytes(layout(outputs))
        if self.buffer is None or self.buffer.numel() < size:
            if self.device.type == "cuda":
                self.buffer = _empty(max(size, ALIGN), dtype=torch.uint8, device=self.device)
                self.fresh = True
            else:
                self.buffer = _from_file(self.path, shared=True, size=max(size, ALIGN), dtype=torch.uint8)
        offset = 0
        for tensor in outputs:
            count = tensor.numel() * tensor.element_size()
            if count:
                place = _view(_view(_narrow(self.buffer, 0, offset, count), tensor.dtype), tensor.shape)
                _copy(place, tensor)
            offset += -(-count // ALIGN) * ALIGN
        if self.device.type == "cuda":
            _synchronize(self.device)
        return size


class Watch:
    """A watched round's bookkeeping in a worker: before each timed call, the caller's draw written into that call's
    inputs (`before`); after it, the outputs checked to be plain tensors, the threads counted, the outputs staged and
    the caller told, whose answer is the next call's draw (`after`). `ask(index, outputs)` sends what the caller
    needs to know of call `index` (-1: none ran yet) and returns its next `Draw`.

    Nothing the verdict rests on stays here: the draws are the caller's, and which calls are compared it decides
    after each call's outputs were copied out of this process's reach (CPU: by the caller; GPU: by the reference
    worker)."""

    def __init__(self, bases: list[list[Any]], placements: list[list[Any]], staging: Staging,
                 ask: Callable[[int, list[torch.Tensor], str], Draw]) -> None:
        self.bases, self.placements, self.staging, self.ask = bases, placements, staging, ask
        self.draw: Draw | None = None
        self.lazy = ""
        self.modes = ""  # a torch function or dispatch mode active while timed: it sees every op of the harness's
        self.threads = runtime.thread_count()
        self.peak = self.threads

    def start(self) -> None:
        self.draw = self.ask(-1, [], "")

    def before(self, placement: int) -> None:
        draw, inputs = self.draw, self.placements[placement]
        if draw is None or not 0 <= draw.first < len(self.bases) or not 0 <= draw.second < len(self.bases):
            raise ValueError(f"the caller's draw {draw} names no trials of {len(self.bases)}")
        call_inputs(self.bases, draw.first, draw.second, weights(draw.seed, _floating(inputs)), inputs)

    def after(self, call: int, outputs: Any) -> None:
        self.peak = max(self.peak, runtime.thread_count())
        if _function_modes() or _dispatch_modes():
            self.modes = self.modes or f"a torch function or dispatch mode was active at timed call {call}"
        why = verify.plain(outputs, self.staging.device)
        if why:
            self.lazy = self.lazy or f"timed call {call} returned {why}"
            self.draw = self.ask(call, [], why)
            return
        flat = verify.flatten(outputs)
        self.staging.write(flat)
        self.draw = self.ask(call, flat, "")


def _nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (tuple, list)):
        return sum(_nbytes(v) for v in value)
    return 0


def _flusher(device: torch.device) -> Callable[[], None]:
    if device.type != "cuda":
        return lambda: None
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 64 << 20) or 64 << 20
    buffer = torch.empty(max(2 * l2, 64 << 20) // 4, dtype=torch.float32, device=device)
    return buffer.zero_


def measure(forward: Callable[[], Any] | Sequence[Callable[[], Any]], device: torch.device, trials: int,
            warmup: int, warm_s: float = 0.0, before: Callable[[int], None] | None = None,
            after: Callable[[int, Any], None] | None = None, cpu_time: bool = False,
            ready: Callable[[], None] | None = None) -> TimedRound:
    """Median and spread of `forward` over exactly `trials` timed calls (the number the caller agreed); on CUDA also
    the host-clock median, which sees work on every stream. On the CPU with `cpu_time` (one intra-op thread on
    both sides), the samples are CPU time (`cpu_seconds`), the wall time beside them: on the 2-core machine with
    two busy processes beside, the honest C++ loop's wall-clock rounds went from 2.0 to 6.4 ms with the share of
    a core it got, and its speedup over five checks moved by 43 %.

    `ready()` runs once warm-up is done, `before(k)` ahead of timed call k and `after(k, outputs)` once it is done
    (synchronized), all outside the timer: a watched round (`Watch`) asks the caller for each call's inputs there
    and stages each call's outputs for it. The readings of the host clock come back too (`loop_start`, `starts`, `loop_end`, seconds on CLOCK_MONOTONIC), so
    the caller can hold them against its own clock (`samples.outside_clock`).

    `forward` may be several forwards (the same model on copies of its inputs, `placements`), taken in turn, trial
    by trial; the last outputs are held back (one fewer than there are forwards, within PLACEMENT_BYTES), so each
    trial writes its outputs somewhere else as well.

    On CUDA the start event is queued behind the L2 flush and a GPU-side wait, without a synchronize in between: the
    host launches forward while the GPU still flushes and waits, so the events time forward's GPU work and not the
    host's launch latency (which a synchronize before the start event would add to every trial of a microsecond
    kernel). The wait outlasts the host's launch of forward as seen in warm-up (`_cover_cycles`; at most
    COVER_CAP_MS): behind the flush alone (~30 us on an H200), a slower launch on a busy or idling CPU leaked into
    some trials and not others, and a 2 us kernel's speedup moved from 0.34x to 2.02x between re-checks. The host
    clock spans flush, wait and forward up to a device-wide synchronize; the GPU time before the start event is
    taken off it.

    Warm-up runs at least `warmup` forwards (fewer when one takes long: no more than WARM_QUEUE_S of them are
    queued) and, with the flush, at least `warm_s` seconds: an idle H200 sits at a fraction of its boost clock, and
    a microsecond kernel timed before the clock is up comes out several times slower. The first forward runs alone,
    to see how long one takes; the next are queued without a synchronize (the GPU never waits for the host), the
    rest run one at a time, so warm-up ends within a forward of `warm_s` however long a forward takes.
    """
    forwards = list(forward) if isinstance(forward, (list, tuple)) else [forward]
    flush = _flusher(device)
    cuda = device.type == "cuda"
    sync = (lambda: _synchronize(device)) if cuda else (lambda: None)
    loop_start = _perf_counter()
    with torch.no_grad():
        warmed, launches, held = _warm_up(forwards, flush, sync, cuda, warmup, warm_s)
        cover = _cover_cycles(launches[1:] or launches) if cuda else 0
        if ready is not None:
            ready()
        events, host, starts = [], [], []
        for k in range(max(trials, 1)):
            run = forwards[(warmed + k) % len(forwards)]
            if before is not None:
                before((warmed + k) % len(forwards))
            if cuda:
                event_ms, host_ms, h0, out = _timed_on_gpu(run, flush, sync, cover)
                events.append(event_ms)
            else:
                cpu_ms, host_ms, h0, out = _timed_on_cpu(run, cpu_time)
                if cpu_time:
                    events.append(cpu_ms)
            host.append(host_ms)
            starts.append(h0)
            if after is not None:
                after(k, out)
            held.append(out)
        held.clear()
        overhead = _sync_overhead(sync) if cuda else 0.0
    samples = events if cuda or cpu_time else host
    clock = "cuda-events" if cuda else "cpu-time" if cpu_time else "host"
    return TimedRound(samples=tuple(samples), host_samples=tuple(host), clock=clock, overhead_ms=overhead,
                      placements=len(forwards), starts=tuple(starts), loop_start=loop_start, loop_end=_perf_counter())


def _warm_up(forwards: list[Callable[[], Any]], flush: Callable[[], Any], sync: Callable[[], None], cuda: bool,
             warmup: int, warm_s: float) -> tuple[int, list[float], collections.deque]:
    """`measure`'s warm-up: how many forwards ran, each one's launch time on the host (seconds), and the outputs
    held back so that each timed trial writes its outputs somewhere else as well."""
    held: collections.deque = collections.deque(maxlen=len(forwards) - 1)
    warmed, warm_started, launches, planned = 0, _perf_counter(), [], max(warmup, 1)
    while True:
        flush()
        h0 = _perf_counter()
        held.append(forwards[warmed % len(forwards)]())
        launches.append(_perf_counter() - h0)
        warmed += 1
        if warmed == 1:
            sync()
            planned = min(planned, max(2, math.ceil(WARM_QUEUE_S / max(_perf_counter() - h0, 1e-6))))
            if not cuda:
                # as many as agreed, up to each placement run twice and its outputs held back before any is timed
                # (the caller agrees that many for a first round, `rounds.time_sides`): with 5 warm-ups of 8
                # placements, some were first run while timed, and a 1.9 ms C++ loop's first round came out 3-25 %
                # slower than its next three (2-core machine); now within 3 %
                planned = max(planned, min(warmup, 2 * len(forwards)))
            room = PLACEMENT_BYTES // max(_nbytes(held[-1]) if held else 0, 1)
            held = collections.deque(held, maxlen=min(len(forwards) - 1, room))
        if warmed >= planned:
            # Synchronized from here: the host queues forwards far faster than a slow one runs, and a 10 ms warm-up
            # on the host clock queued seconds of 6 ms forwards (13 s to time one on the H200)
            sync()
            if not cuda or _perf_counter() - warm_started >= warm_s:
                return warmed, launches, held


def _timed_on_gpu(run: Callable[[], Any], flush: Callable[[], Any], sync: Callable[[], None],
                  cover: int) -> tuple[float, float, float, Any]:
    """One timed call on a GPU: its events' milliseconds, the host clock's (less the GPU time before the start
    event), the host clock's reading at its start, and its outputs."""
    flushed, start, end = (_Event(enable_timing=True) for _ in range(3))
    h0 = _perf_counter()
    _record(flushed)
    flush()
    if cover:
        _sleep(cover)
    _record(start)
    out = run()
    _record(end)
    sync()
    h1 = _perf_counter()
    return _elapsed(start, end), (h1 - h0) * 1e3 - _elapsed(flushed, start), h0, out


def _timed_on_cpu(run: Callable[[], Any], cpu_time: bool) -> tuple[float, float, float, Any]:
    """One timed call on the CPU, the process's CPU clock read nearest the forward: its CPU milliseconds (0 without
    `cpu_time`), its wall milliseconds, the host clock's reading at its start, and its outputs."""
    c0 = cpu_seconds() if cpu_time else 0.0
    h0 = _perf_counter()
    out = run()
    h1 = _perf_counter()
    return (cpu_seconds() - c0) * 1e3 if cpu_time else 0.0, (h1 - h0) * 1e3, h0, out


def _cover_cycles(launches: list[float]) -> int:
    """GPU clock cycles to wait so that forward is launched before its start event runs: 1.5 times the launch time
    (seconds, host clock) that 90 % of warm-up launches stayed under (one stalled launch does not slow every trial),
    plus 20 us, at most COVER_CAP_MS, at the clock rate measured now."""
    launch = sorted(launches)[int(0.9 * (len(launches) - 1))]
    seconds = min(1.5 * launch + 20e-6, COVER_CAP_MS / 1e3)
    probe = 200_000
    start, end = _Event(enable_timing=True), _Event(enable_timing=True)
    _record(start)
    _sleep(probe)
    _record(end)
    _synchronize()
    per_ms = probe / max(_elapsed(start, end), 1e-3)
    return int(per_ms * seconds * 1e3)


def _sync_overhead(sync: Callable[[], None], repeats: int = 20) -> float:
    """Host time of an empty timed region: what host time always adds to event time."""
    samples = []
    for _ in range(repeats):
        start, end = _Event(enable_timing=True), _Event(enable_timing=True)
        sync()
        h0 = _perf_counter()
        _record(start)
        _record(end)
        sync()
        samples.append((_perf_counter() - h0) * 1e3)
    return statistics.median(samples)
