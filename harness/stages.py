"""The commands a worker answers, one per stage: build, reference, run (solution), compare, inspect, time.

Each takes the worker's `Side` and its command (`messages`), and returns its reply; files travel through `exchange`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.utils.cpp_extension as cpp_extension

from dice_lsp.harness import inspect as runtime
from dice_lsp.harness import integrity, light, timing, verify
from dice_lsp.harness.build import Builder, compile_entry
from dice_lsp.harness.messages import (Build, Built, Compare, Compared, CompareTimed, Compile, Compiled, HandTimed,
                                       Handed, Inspect, Inspected, LibraryLine, MakeReference, OutputsSaved, Prepare,
                                       Prepared, Ran, ReferenceMade, RunSolution, SaveOutputs, Time, TimedCall, Timed,
                                       TimedRound, TrialResult)
from dice_lsp.harness.report import KernelShare
from dice_lsp.harness.side import Side, load_module, pick_device


def _local_arch(fallback: str) -> str:
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return f"{major}.{minor}"
    return fallback


def build(side: Side, command: Build) -> Built:
    """Import the solution: its load_inline calls build (or load from the cache) here."""
    options = side.options = command.options
    side.received = _receive_inputs(command.handout)  # first: nothing of the solution's has run here yet
    arch = os.environ.get("TORCH_CUDA_ARCH_LIST") or _local_arch(command.arch)
    os.environ["TORCH_CUDA_ARCH_LIST"] = arch
    side.builder = Builder(options.cache_dir, arch, side.ask)
    side.builder.install()
    side.census = runtime.baseline(options.device)  # who runs before the solution is imported
    side.module = load_module(command.path, "dice_solution")
    return Built(extensions=tuple(side.builder.extensions), arch=arch, cuda_available=torch.cuda.is_available(),
                 has_model_new=hasattr(side.module, "ModelNew"))


def _receive_inputs(handout: dict[str, Any] | None) -> dict[str, Any] | None:
    """The trial inputs a kept reference worker handed out (`_hand_out`), copied out of its memory by CUDA IPC.

    Done before the solution is imported, and the views go as soon as they are copied (torch closes a mapping with
    its last view), so no code of the solution's ever runs while this process can reach the reference's memory.
    None when there is nothing to receive or it fails: the inputs come from the exchange file then."""
    if not handout:
        return None

    def own(row: list[dict[str, Any] | None]) -> list[torch.Tensor | None]:
        return [None if entry is None else verify.receive([entry])[0].clone() for entry in row]

    try:
        received = {"trials": [own(row) for row in handout["trials"]], "changed": own(handout["changed"])}
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001  (any failure means the file, which always holds the inputs)
        return None
    return received


def compile_call(side: Side, command: Compile) -> Compiled:
    """Builder side: make one cache entry for a candidate's load_inline call, without loading it."""
    os.environ["TORCH_CUDA_ARCH_LIST"] = command.call.arch  # as the candidate's worker keyed it
    return Compiled(extension=compile_entry(command.call, command.cache_dir, command.light_build, command.mode))


def prepare(side: Side, command: Prepare) -> Prepared:
    """Build what every light build shares (the precompiled torch header) ahead of the first check."""
    os.environ["TORCH_CUDA_ARCH_LIST"] = os.environ.get("TORCH_CUDA_ARCH_LIST") or _local_arch("9.0")  # as build
    return Prepared(header=str(light.prepare(Path(command.cache_dir), cpp_extension.load_inline)))


EXPECTED_ON_GPU = 0.05  # the share of the GPU's memory a reference worker may keep expected outputs and inputs in


def reference(side: Side, command: MakeReference) -> ReferenceMade:
    """Build Model after the seed, make every trial's inputs, keep the expected outputs here."""
    options = side.options = command.options
    side.device = pick_device(options.device)
    runtime.set_precision(options.tf32, options.cudnn_tf32)
    module = side.module = load_module(command.path, "dice_reference")
    init = list(module.get_init_inputs()) if hasattr(module, "get_init_inputs") else []
    torch.manual_seed(options.seed)
    side.model = module.Model(*init).to(side.device).eval()
    trials = []
    # The expected outputs stay on the GPU while they fit in EXPECTED_ON_GPU of its memory: compare reads them in
    # place at every check of a kept reference (5120x5120 outputs: 0.7 GB copied to the GPU again each time
    # otherwise); past that they wait in host memory, so an idle kept worker never holds much of the user's GPU
    total = torch.cuda.get_device_properties(side.device).total_memory if side.device.type == "cuda" else 0
    room = [EXPECTED_ON_GPU * total]

    def expected(outputs: Any) -> list[torch.Tensor]:
        values = verify.flatten(outputs)
        size = sum(v.numel() * v.element_size() for v in values)
        on_gpu = size <= room[0] and all(v.is_cuda for v in values)
        room[0] -= size if on_gpu else 0
        return verify.copies(values, on_gpu)

    with torch.no_grad():
        for seed in verify.trial_seeds(options.seed, options.correctness_trials):
            torch.manual_seed(seed)
            inputs = list(module.get_inputs())
            trials.append((seed, inputs))
            side.expected.append(expected(side.model(*verify.to_device(inputs, side.device))))
        torch.manual_seed(options.seed + verify.CHANGED_SEED_OFFSET)
        changed = list(module.get_inputs())
        side.expected_changed = expected(side.model(*verify.to_device(changed, side.device)))
    side.trials = trials
    torch.save({"init": init, "trials": trials, "changed": changed}, Path(command.exchange) / "inputs.pt")
    sets = [inputs for _seed, inputs in trials] + [changed]
    size = sum(t.numel() * t.element_size() for inputs in sets for t in inputs if isinstance(t, torch.Tensor))
    handout = _hand_out(side, sets) if side.device.type == "cuda" and size <= room[0] else None
    return ReferenceMade(device=_device_name(side.device), **runtime.precision_state(), handout=handout,
                         dtypes=tuple(sorted({str(t.dtype) for out in side.expected for t in out})))


def _hand_out(side: Side, sets: list[list[Any]]) -> dict[str, Any] | None:
    """Copies of every trial's inputs on the GPU, kept by this (reference) worker for the solution workers of this
    and later checks to copy by CUDA IPC (`_receive_inputs`): with 4864x4864 inputs, loading them from the file took
    a re-check's solution worker 0.2 s. Contiguous tensors only (a description has no strides); None for the rest,
    which come from the file. The descriptions, JSON-ready; None when sharing fails."""
    side.handout = [[v.detach().to(side.device, copy=True) if _shareable(v) else None for v in inputs]  # own copies
                    for inputs in sets]
    try:
        described = [[None if t is None else verify.share([t])[0] for t in row] for row in side.handout]
    except (RuntimeError, OSError):
        side.handout = []
        return None
    return {"trials": described[:-1], "changed": described[-1]}


def _shareable(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_contiguous() and value.numel() > 0


BASE_BYTES = 512 << 20  # what the trials' inputs kept for timing (`timing.FreshInputs`) may take, past two trials


def run(side: Side, command: RunSolution) -> Ran:
    """Build ModelNew after the same seed and run every trial, then the first trial again on changed inputs.

    Also: what forward returned (plain tensors?), which inputs it wrote into, which threads and processes the
    solution started and when (import, __init__, forward), and copies of the trials' inputs, taken before forward
    could write into them, for the timed calls to mix (`bases`)."""
    options = side.options
    side.device = pick_device(options.device)
    runtime.set_precision(options.tf32, options.cudnn_tf32)
    before = runtime.precision_state()
    census = side.census if side.census is not None else runtime.baseline(options.device)
    started = _described(runtime.started_since(census), "at import")
    # Mapped, not read: a kept reference's inputs stay in the page cache between checks, and with 4096x4096 inputs
    # reading them into fresh memory took most of a second (the mapping is private: writes never reach the file)
    data = torch.load(Path(command.exchange) / "inputs.pt", weights_only=False, mmap=True)
    torch.manual_seed(options.seed)
    side.model = side.module.ModelNew(*data["init"]).to(side.device).eval()
    seen = runtime.census()
    started += _described(runtime.started_since(census, seen), "in __init__")
    sharing = command.share and side.device.type == "cuda"
    outputs, mutated, lazy, room = [], set(), "", [BASE_BYTES]
    side.bases = []
    with torch.no_grad():
        first = None
        received, side.received = side.received, None
        for index, (seed, inputs) in enumerate(data["trials"]):
            tensors = _inputs(inputs, received["trials"][index] if received else None, side.device)
            if received:
                received["trials"][index] = None  # each trial's copies go with it
            copies = [verify.clone(t) for t in tensors]  # before forward may write into its inputs
            _keep_base(side, copies, room)
            if index == 0:  # timed and inspected later, and changed in place below
                first, side.trials = tensors, [(seed, copies)]
            result = side.model(*tensors)
            lazy = lazy or verify.plain(result, side.device)
            mutated |= {i for i, (a, b) in enumerate(zip(copies, tensors)) if not verify.same(a, b)}
            outputs.append(verify.copies(verify.flatten(result), sharing))
        changed = _inputs(data["changed"], received["changed"] if received else None, side.device)
        count = verify.change_in_place(first, changed)
        copies = [verify.clone(t) for t in first]
        result = side.model(*first)
        lazy = lazy or verify.plain(result, side.device)
        mutated |= {i for i, (a, b) in enumerate(zip(copies, first)) if not verify.same(a, b)}
        changed_out = verify.copies(verify.flatten(result), sharing)
        if side.device.type == "cuda":
            torch.cuda.synchronize()
    started += _described(runtime.started_since(census, seen), "in forward")
    side.census = {**census, **runtime.census()}  # reported once: the timing reports only what starts after
    side.outputs = {"trials": outputs, "changed": changed_out}
    handed = _hand_over(side, Path(command.outputs or command.exchange), sharing)
    after = runtime.precision_state()
    return Ran(device=_device_name(side.device), changed_tensors=count, threads=tuple(started),
               precision_before=before, precision_after=after, outputs=handed,
               inputs="shared" if received else "file", mutated=tuple(sorted(mutated)), lazy=lazy,
               tampered=tuple(SEAL.broken()), bases=len(side.bases))


def _keep_base(side: Side, inputs: list[Any], room: list[int]) -> None:
    """Keep one trial's inputs for the timed calls to mix: the first two always, more while they fit BASE_BYTES."""
    size = sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor))
    if len(side.bases) < 2 or size <= room[0]:
        side.bases.append(inputs)
        room[0] -= size


def _described(found: dict[str, str], when: str) -> list[str]:
    return [f"{key} '{name}' ({when})" for key, name in found.items()]


def _inputs(from_file: list[Any], received: list[Any] | None, device: torch.device) -> list[Any]:
    """One trial's inputs on `device`: the copies received from the reference worker where there are, else the
    file's."""
    received = received or [None] * len(from_file)
    return [verify.to_device(value if got is None else got, device) for value, got in zip(from_file, received)]


def _hand_over(side: Side, exchange: Path, sharing: bool) -> str:
    """Hand `side.outputs` to the reference worker: CUDA IPC handles in outputs.json when every output is on the GPU,
    else (or when sharing fails) host copies in outputs.pt. Says which."""
    outputs = side.outputs
    if sharing and all(t.is_cuda for out in [*outputs["trials"], outputs["changed"]] for t in out):
        try:
            described = {"trials": [verify.share(out) for out in outputs["trials"]],
                         "changed": verify.share(outputs["changed"])}
        except (RuntimeError, OSError):
            pass
        else:
            (exchange / "outputs.json").write_text(json.dumps(described))
            return "shared"
    _save_outputs(side, exchange)
    return "file"


def save_outputs(side: Side, command: SaveOutputs) -> OutputsSaved:
    """Write the last run's outputs to outputs.pt: the fallback when the reference worker cannot open shared ones."""
    _save_outputs(side, Path(command.exchange))
    return OutputsSaved()


def _save_outputs(side: Side, exchange: Path) -> None:
    outputs = side.outputs
    torch.save({"trials": [verify.detach_cpu(out) for out in outputs["trials"]],
                "changed": verify.detach_cpu(outputs["changed"])}, exchange / "outputs.pt")


# Measured on the 16-core H200 machine: comparing two 512x512 outputs took 2.7 s in a worker while the next check's
# spares started up beside it (importing torch, creating a CUDA context), 0.05 s in one process alone. The likely
# cause: each of the comparison's elementwise passes is a parallel region over one intra-op thread per core, and with
# the cores shared every region waits on a descheduled thread. A few threads leave the spares room.
COMPARE_THREADS = 4


def compare(side: Side, command: Compare) -> Compared:
    """Reference side: compare the solution's outputs file against the expected outputs kept in memory."""
    threads = torch.get_num_threads()
    torch.set_num_threads(min(threads, COMPARE_THREADS))
    try:
        return _compare(side, command)
    finally:
        torch.set_num_threads(threads)


def _compare(side: Side, command: Compare) -> Compared:
    exchange = Path(command.exchange)
    if (exchange / "outputs.pt").exists():
        got = torch.load(exchange / "outputs.pt", weights_only=True, mmap=True)
    else:
        try:
            described = json.loads((exchange / "outputs.json").read_text())
            got = {"trials": [verify.receive(out) for out in described["trials"]],
                   "changed": verify.receive(described["changed"])}
        except Exception as error:  # the caller asks for outputs.pt and compares again
            return Compared(unshared=f"{type(error).__name__}: {error}")
    atol, rtol = side.options.atol, side.options.rtol
    trials = []
    device = side.device if side.device.type == "cuda" else None  # on the GPU: 16 M elements in ms, not seconds
    for (seed, _inputs), expected, outputs in zip(side.trials, side.expected, got["trials"]):
        trials.append(TrialResult(seed=seed, **verify.compare(outputs, expected, atol, rtol, device)))
    changed = verify.compare(got["changed"], side.expected_changed, atol, rtol, device)
    trials.append(TrialResult(seed=side.options.seed + verify.CHANGED_SEED_OFFSET, **changed, changed_inputs=True))
    norms = [verify.norm(t, device) for out in side.expected for t in out]
    if side.itself is None:
        side.itself = _itself(side, device)
    unstable, mutates = side.itself
    return Compared(trials=tuple(trials), reference_norm=max(norms) if norms else 0.0, unstable=unstable,
                    mutates=mutates)


def _itself(side: Side, device: torch.device | None) -> tuple[str, tuple[int, ...]]:
    """Run the reference twice on copies of the first trial's inputs: whether it agrees with itself (a reference
    that does not is no target for any solution: its own second run would "mismatch"), and which inputs it writes
    into (a solution may then write into them too). Once per reference worker."""
    _seed, inputs = side.trials[0]
    runs, mutates = [], set()
    with torch.no_grad():
        for _ in range(2):
            given = [verify.clone(t) for t in verify.to_device(inputs, side.device)]
            kept = [verify.clone(t) for t in given]
            runs.append(verify.copies(verify.flatten(side.model(*given)), side.device.type == "cuda"))
            mutates |= {i for i, (a, b) in enumerate(zip(kept, given)) if not verify.same(a, b)}
    again = verify.compare(runs[1], runs[0], side.options.atol, side.options.rtol, device)
    unstable = "" if again["passed"] else (
        f"two runs on the same inputs (trial seed {_seed}) differ: "
        + (again["note"] or f"max abs error {again['max_abs_error']:.3g} at {again['where']}"))
    return unstable, tuple(sorted(mutates))


def inspect(side: Side, command: Inspect) -> Inspected:
    """Who did forward's work (`runtime.work`): on a GPU each kernel's share of its time, on the CPU each PyTorch
    operator's; and PyTorch's share by the line that called it. A reference worker answers from what it found the
    first time (its model and inputs do not change)."""
    side.outputs = None  # compared by now: the GPU copies handed over go
    if side.work is None or not side.expected:  # the solution's worker inspects once, a reference's keeps it
        inputs = verify.to_device(side.trials[0][1], side.device)
        given = [verify.clone(t) for t in inputs]  # forward may write into them
        side.work = runtime.work(lambda: side.model(*given), list(command.kernels),
                                 getattr(side.module, "__file__", "") or "", side.device)
    found = side.work
    rows = tuple(KernelShare(**row) for row in found["rows"])
    lines = tuple(LibraryLine(**line) for line in found["lines"])
    cuda = side.device.type == "cuda"
    return Inspected(kernels=rows if cuda else (), operators=() if cuda else rows, lines=lines,
                     own_share=found["own_share"], streams=found["streams"])


def time(side: Side, command: Time) -> Timed:
    """Time forward: the solution, or the reference eager or under torch.compile. One round of several: the command
    says how many timed calls (exactly), warm-up forwards and seconds this round gets, whether each call gets
    fresh input values (`timing.FreshInputs`), how many calls' outputs to keep for the reference to compare
    (`timing.Keeper`, the solution's), and the CPU's intra-op threads (both sides the same)."""
    options = side.options
    side.outputs = None  # compared by now: the GPU copies handed over go before anything is timed
    runtime.set_precision(options.tf32, options.cudnn_tf32)
    if side.device.type == "cpu" and command.threads:
        torch.set_num_threads(command.threads)
    if side.timed_check != command.check or side.timed_inputs is None:  # copied once a check, not a round
        side.timed_inputs, side.timed_check, side.kept = None, command.check, []  # the last check's copies go first
        side.timed_inputs = timing.placements(_timed_copies(side), side.device)
    model = side.model
    if command.compiled:
        if side.compiled is None:  # compiled once; later rounds reuse it
            side.compiled = torch.compile(side.model)
        model = side.compiled
    forwards = [lambda inputs=inputs: model(*inputs) for inputs in side.timed_inputs]
    fresh = timing.FreshInputs(_bases(side), side.timed_inputs) if command.fresh else None
    keeper = timing.Keeper(command.keep, fresh, side.device) if command.watch else None
    tampered = SEAL.broken() if command.watch else []
    result = timing.measure(forwards, side.device, _given(command.trials, options.timing_trials),
                            _given(command.warmup, options.warmup_trials), command.warm_s, fresh, keeper,
                            cpu_time=side.device.type == "cpu" and command.threads == 1)
    found: dict[str, Any] = {}
    if keeper is not None:
        kept = [(TimedCall(command.round, call, *described), outputs) for call, described, outputs in keeper.kept]
        side.kept += kept
        threads = _described(runtime.started_since(side.census or {}), "while timed")
        if keeper.peak > keeper.threads and not threads:
            threads.append(f"{keeper.peak - keeper.threads} more thread(s) ran during a timed call and ended")
        found = {"kept": tuple(call for call, _ in kept), "lazy": keeper.lazy, "threads": tuple(threads),
                 "tampered": tuple(dict.fromkeys(tampered + SEAL.broken()))}
    timed = {k: v for k, v in result.items() if k in TimedRound.__dataclass_fields__}
    return Timed(timing=TimedRound(**timed), **runtime.precision_state(), **found)


def _timed_copies(side: Side) -> list[Any]:
    """Copies, on the device, of the first trial's inputs for the timed calls (never the inputs kept elsewhere:
    fresh values are written into these): the handout's on a kept reference's GPU, else the trial's own."""
    on_gpu = side.handout[0] if side.handout else [None] * len(side.trials[0][1])
    return [verify.clone(verify.to_device(v, side.device)) if g is None else g.clone()
            for v, g in zip(side.trials[0][1], on_gpu)]


def _bases(side: Side) -> list[list[Any]]:
    """The trials' inputs the timed calls mix, on the device: the solution's copies (`run`), or the reference's
    trials (the handout's GPU copies where there are)."""
    if not side.bases:
        shared = side.handout or [[None] * len(inputs) for _seed, inputs in side.trials]
        side.bases = [[verify.to_device(v, side.device) if g is None else g for v, g in zip(inputs, row)]
                      for (_seed, inputs), row in zip(side.trials, shared)]
    return side.bases


def hand_timed(side: Side, command: HandTimed) -> Handed:
    """Solution side: hand the kept timed calls' outputs to the reference worker, as `_hand_over` does the trials'
    (outputs.json by CUDA IPC, or outputs.pt), under "timed"; the files of the trials' outputs go first."""
    folder = Path(command.exchange)
    for name in ("outputs.json", "outputs.pt"):
        (folder / name).unlink(missing_ok=True)
    outputs = [copies for _call, copies in side.kept]
    if command.share and outputs and all(t.is_cuda for out in outputs for t in out):
        try:
            (folder / "outputs.json").write_text(json.dumps({"timed": [verify.share(out) for out in outputs]}))
            return Handed(outputs="shared", calls=tuple(call for call, _ in side.kept))
        except (RuntimeError, OSError):
            pass
    torch.save({"timed": [verify.detach_cpu(out) for out in outputs]}, folder / "outputs.pt")
    return Handed(outputs="file", calls=tuple(call for call, _ in side.kept))


def compare_timed(side: Side, command: CompareTimed) -> Compared:
    """Reference side: make the inputs of each timed call the solution kept (`timing.call_inputs`, from this
    worker's own copies of the trials' inputs), run the reference on them, and compare the solution's outputs."""
    exchange = Path(command.exchange)
    if (exchange / "outputs.pt").exists():
        got = torch.load(exchange / "outputs.pt", weights_only=True, mmap=True)["timed"]
    else:
        got = [verify.receive(out) for out in json.loads((exchange / "outputs.json").read_text())["timed"]]
    if len(got) != len(command.calls):
        raise ValueError(f"{len(got)} timed outputs handed over for {len(command.calls)} calls")
    device = side.device if side.device.type == "cuda" else None
    bases, results = _bases(side), []
    with torch.no_grad():
        for call, outputs in zip(command.calls, got):
            if not (0 <= call.first < len(bases) and 0 <= call.second < len(bases)):
                raise ValueError(f"timed call {call.index} names trials {call.first} and {call.second}")
            inputs = timing.call_inputs(bases, call.first, call.second, call.weights)
            expected = verify.flatten(side.model(*inputs))
            found = verify.compare(list(outputs), expected, side.options.atol, side.options.rtol, device)
            results.append(TrialResult(seed=call.index, **found))
    return Compared(trials=tuple(results))


def _given(value: Any, default: Any) -> Any:
    return default if value is None else value


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


SEAL = integrity.Seal()  # the harness as loaded: before any command, so before any code of the candidate's
