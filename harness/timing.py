"""Time stage: warm-up, an L2 flush before each trial, CUDA events per trial and host time over a device-wide sync.

The clocks are bound when this module is imported, before any candidate code runs in the worker.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch

from harness.samples import summary

_perf_counter = time.perf_counter
_Event = torch.cuda.Event
_record = torch.cuda.Event.record
_elapsed = torch.cuda.Event.elapsed_time
_synchronize = torch.cuda.synchronize


def _flusher(device: torch.device) -> Callable[[], None]:
    if device.type != "cuda":
        return lambda: None
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 64 << 20) or 64 << 20
    buffer = torch.empty(max(2 * l2, 64 << 20) // 4, dtype=torch.float32, device=device)
    return buffer.zero_


def measure(forward: Callable[[], Any], device: torch.device, trials: int, warmup: int,
            budget_s: float = 0.0, warm_s: float = 0.0) -> dict[str, Any]:
    """Median and spread of `forward`; on CUDA also the host-clock median, which sees work on every stream.

    At least `trials` trials; a short forward gets more, until the timed loop has run `budget_s` seconds (at most
    ten times `trials`), so a microsecond kernel's median rests on enough samples to repeat.

    On CUDA the start event is queued right behind the L2 flush, without a synchronize in between: the host launches
    forward while the GPU still flushes, so the events time forward's GPU work and not the host's launch latency
    (which a synchronize before the start event would add to every trial of a microsecond kernel). The host clock
    spans flush and forward up to a device-wide synchronize; the flush's own GPU time is taken off it.

    Warm-up runs at least `warmup` forwards and, with the flush, at least `warm_s` seconds without a synchronize:
    an idle H200 sits at a fraction of its boost clock, and a microsecond kernel timed before the clock is up
    comes out several times slower.
    """
    flush = _flusher(device)
    cuda = device.type == "cuda"
    sync = (lambda: _synchronize(device)) if cuda else (lambda: None)
    with torch.no_grad():
        warmed, warm_started = 0, _perf_counter()
        while warmed < max(warmup, 1) or (cuda and _perf_counter() - warm_started < warm_s):
            flush()
            forward()
            warmed += 1
        sync()
        events, host = [], []
        limit, loop_started = max(trials, 1) * 10, _perf_counter()
        while len(host) < trials or (len(host) < limit and _perf_counter() - loop_started < budget_s):
            if cuda:
                flushed, start, end = (_Event(enable_timing=True) for _ in range(3))
                h0 = _perf_counter()
                _record(flushed)
                flush()
                _record(start)
                forward()
                _record(end)
                sync()
                h1 = _perf_counter()
                events.append(_elapsed(start, end))
                host.append((h1 - h0) * 1e3 - _elapsed(flushed, start))
            else:
                flush()
                h0 = _perf_counter()
                forward()
                host.append((_perf_counter() - h0) * 1e3)
        overhead = _sync_overhead(sync) if cuda else 0.0
    samples = events if cuda else host
    return {**summary(samples), "trials": len(samples), "host_median_ms": statistics.median(host),
            "clock": "cuda-events" if cuda else "host", "overhead_ms": overhead, "samples": samples,
            "host_samples": host}


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
