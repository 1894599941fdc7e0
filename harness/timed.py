"""The time stage's commands in a worker: a timing round (`time`), and on the reference's side a copy of a kept
call's staged outputs (`snapshot`) and the comparison of the kept calls (`compare_timed`). `rounds` is the caller's
side of the same protocol; docs/THREATS.md says why it is shaped so.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from dice_lsp.harness import runtime
from dice_lsp.harness import timing, verify
from dice_lsp.harness.messages import (Called, Compared, CompareTimed, Next, Output, Snapshot, Snapshotted, Time,
                                       TimedCall, Timed, TrialResult)
from dice_lsp.harness.side import Side
from dice_lsp.harness.stages import SEAL, described, keep_base, trial_inputs


def time(side: Side, command: Time) -> Timed:
    """Time forward: the solution, or the reference eager or under torch.compile. One round of several: the command
    says how many timed calls (exactly), warm-up forwards and seconds this round gets, whether the round is watched
    (`timing.Watch`: the caller draws each call's inputs and takes a copy of the outputs it keeps), and the CPU's
    intra-op threads (both sides the same)."""
    options = side.options
    side.outputs = None  # compared by now: the GPU copies handed over go before anything is timed
    runtime.set_precision(options.tf32, options.cudnn_tf32)
    if side.device.type == "cpu" and command.threads:
        torch.set_num_threads(command.threads)
    if side.timed_check != command.check or side.timed_inputs is None:  # copied once a check, not a round
        side.timed_inputs, side.timed_check = None, command.check  # the last check's copies go first
        side.snapshots, side.staging_view = {}, None  # a kept reference worker: what an ended check left
        side.timed_inputs = timing.placements(_timed_copies(side), side.device)
    model = side.model
    if command.compiled:
        if side.compiled is None:  # compiled once; later rounds reuse it
            side.compiled = torch.compile(side.model)
        model = side.compiled
    forwards = [lambda inputs=inputs: model(*inputs) for inputs in side.timed_inputs]
    watch = None
    if command.watch:
        if side.staging is None or side.staging.path != command.staging:
            side.staging = timing.Staging(command.staging, side.device)
        watch = timing.Watch(_bases(side), side.timed_inputs, side.staging, _asker(side))
    tampered = SEAL.broken() if watch is not None else []
    result = timing.measure(forwards, side.device, command.trials, command.warmup, command.warm_s,
                            watch.before if watch else None, watch.after if watch else None,
                            cpu_time=side.device.type == "cpu" and command.threads == 1,
                            ready=watch.start if watch else None)
    if watch is None:
        return Timed(timing=result, **runtime.precision_state())
    threads = described(runtime.started_since(side.census or {}), "while timed")
    if watch.peak > watch.threads and not threads:
        threads.append(f"{watch.peak - watch.threads} more thread(s) ran during a timed call and ended")
    broken = tampered + SEAL.broken() + ([watch.modes] if watch.modes else [])
    return Timed(timing=result, **runtime.precision_state(), lazy=watch.lazy, threads=tuple(threads),
                 tampered=tuple(dict.fromkeys(broken)))


def _asker(side: Side) -> Any:
    """How a watched round tells the caller of each call and learns the next call's inputs (`timing.Watch.ask`)."""
    def ask(index: int, outputs: list[torch.Tensor], lazy: str) -> timing.Draw:
        staging = side.staging
        shared: tuple[dict[str, Any], ...] = ()
        if outputs and staging.fresh:  # a new GPU buffer: the reference worker opens it by CUDA IPC
            shared, staging.fresh = tuple(verify.share([staging.buffer])), False
        layout = tuple(Output(dtype, shape) for dtype, shape in timing.layout(outputs))
        answer = side.exchange(Called(index=index, outputs=layout, staging=shared, lazy=lazy))
        if not isinstance(answer, Next):
            raise RuntimeError(f"the caller answered a timed call with {answer.tag}")
        return timing.Draw(answer.first, answer.second, answer.seed)
    return ask


def _timed_copies(side: Side) -> list[Any]:
    """Copies, on the device, of the first trial's inputs for the timed calls (never the inputs kept elsewhere:
    fresh values are written into these)."""
    inputs = trial_inputs(side, 0) if side.expected else side.trials[0][1]
    return [verify.clone(t) for t in inputs]


def _bases(side: Side) -> list[list[Any]]:
    """The trials' inputs the timed calls mix, on the device: the solution's copies (`run`), or on the reference's
    side the same trials, kept by the same rule (`_keep_base`)."""
    if not side.bases:
        for index in range(len(side.trials)):
            keep_base(side.bases, trial_inputs(side, index))
    return side.bases


SNAPSHOT_SHARE = 0.05  # of the GPU's memory, what a reference worker keeps of timed calls' copies on the GPU


def snapshot(side: Side, command: Snapshot) -> Snapshotted:
    """Reference side, on a GPU: copy the solution's staged outputs into this worker's memory as `command.slot`,
    while the solution's worker waits (it learns of the copy only after it is taken). On the GPU while the copies
    fit SNAPSHOT_SHARE of its memory, else to the host."""
    if command.staging:
        [side.staging_view] = verify.receive(list(command.staging))
    size = timing.staged_bytes([(o.dtype, o.shape) for o in command.outputs])
    if side.staging_view is None or side.staging_view.numel() < size:
        raise ValueError(f"the staged outputs take {size} bytes; the staging buffer holds "
                         f"{0 if side.staging_view is None else side.staging_view.numel()}")
    total = torch.cuda.get_device_properties(side.device).total_memory
    held = sum(t.numel() for t in side.snapshots.values())
    keep_here = held + size <= SNAPSHOT_SHARE * total
    copy = side.staging_view[:size].clone() if keep_here else side.staging_view[:size].to("cpu")
    torch.cuda.synchronize(side.device)
    side.snapshots[command.slot] = copy
    return Snapshotted()


def _staged(buffer: torch.Tensor, outputs: tuple[Output, ...], device: torch.device) -> list[torch.Tensor]:
    """The tensors a staged copy holds, by the layout the solution's worker gave (`timing.Staging.write`)."""
    found, offset = [], 0
    for output in outputs:
        dtype = getattr(torch, output.dtype, None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"a staged output has no dtype {output.dtype!r}")
        count = math.prod(output.shape) * dtype.itemsize
        found.append(buffer[offset:offset + count].view(dtype).view(output.shape).to(device))
        offset += -(-count // timing.ALIGN) * timing.ALIGN
    return found


def _snapshot_of(side: Side, call: TimedCall, exchange: Path) -> list[torch.Tensor]:
    """The copy taken of a kept call's outputs: a file the caller wrote (CPU), or a slot this worker holds (GPU)."""
    if side.device.type == "cuda":
        buffer = side.snapshots.get(call.slot)
        if buffer is None:
            raise ValueError(f"no copy was taken of timed call {call.index} of round {call.round}")
    else:
        path = exchange / f"timed-{call.slot}.bin"
        size = timing.staged_bytes([(o.dtype, o.shape) for o in call.outputs])
        if path.stat().st_size < size:
            raise ValueError(f"the copy of timed call {call.index} of round {call.round} holds "
                             f"{path.stat().st_size} bytes of {size}")
        buffer = torch.from_file(str(path), shared=False, size=size, dtype=torch.uint8)
    return _staged(buffer, call.outputs, side.device)


def compare_timed(side: Side, command: CompareTimed) -> Compared:
    """Reference side: make the inputs of each timed call the caller kept, from its record of the call
    (`timing.call_inputs`, from this worker's own copies of the trials' inputs), run the reference on them, and
    compare the copy taken of the solution's outputs when the call ended."""
    exchange = Path(command.exchange)
    device = side.device if side.device.type == "cuda" else None
    bases, results = _bases(side), []
    try:
        with torch.no_grad():
            for call in command.calls:
                if not (0 <= call.first < len(bases) and 0 <= call.second < len(bases)):
                    raise ValueError(f"timed call {call.index} names trials {call.first} and {call.second}")
                inputs = timing.call_inputs(bases, call.first, call.second,
                                            timing.weights(call.seed, timing.floating(bases[0])))
                expected = verify.flatten(side.model(*inputs))
                got = _snapshot_of(side, call, exchange)
                found = verify.compare(got, expected, side.options.atol, side.options.rtol, device)
                results.append(TrialResult(seed=call.index, **found))
    finally:
        side.snapshots = {}
        side.staging_view = None
    return Compared(trials=tuple(results))
