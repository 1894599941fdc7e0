"""The commands a worker answers, one per stage: build, reference, run (solution), compare, inspect, time.

Each takes the worker's `Side` and its command (`messages`), and returns its reply; files travel through `exchange`.
"""

from __future__ import annotations

import contextlib
import json
import glob
import os
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
import torch.utils.cpp_extension as cpp_extension

from dice_lsp.harness import runtime
from dice_lsp.harness import integrity, light, verify, view
from dice_lsp.harness.build import Builder, Call, Extension, compile_entry
from dice_lsp.harness.messages import (Build, BuildAnswer, BuildRequest, Built, Compare, Compared, Compile, Compiled,
                                       Inspect, Inspected, LibraryLine, MakeReference, OutputsSaved, Prepare,
                                       Prepared, Ran, ReferenceMade, RunSolution, SaveOutputs, TrialResult)
from dice_lsp.harness.report import KernelShare
from dice_lsp.harness.side import RunState, Side, load_module, pick_device


def _local_arch(fallback: str) -> str:
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return f"{major}.{minor}"
    return fallback


def build(side: Side, command: Build) -> Built:
    """Import the solution: its load_inline calls build (or load from the cache) here."""
    options = side.options = command.options
    arch = os.environ.get("TORCH_CUDA_ARCH_LIST") or _local_arch(command.arch)
    os.environ["TORCH_CUDA_ARCH_LIST"] = arch
    side.builder = Builder(options.cache_dir, arch, _builds(side))
    side.builder.install()
    side.census = runtime.baseline(options.device)  # who runs before the solution is imported
    side.module = load_module(command.path, "dice_solution")
    return Built(extensions=tuple(side.builder.extensions), arch=arch, cuda_available=torch.cuda.is_available(),
                 has_model_new=hasattr(side.module, "ModelNew"), cuda_error=cuda_failure())


def cuda_failure(nodes: str = view.GPU_NODE) -> str:
    """Why CUDA did not start in this process though this torch has CUDA and a GPU's device node is here (a GPU
    worker's sandbox binds them); '' when it started or there is no GPU to start. On the H100 of 2026-12-07 the driver
    failed inside the sandbox with error 304 and `torch.cuda.is_available()` only said False: the check then ran on
    the CPU and said "no GPU"."""
    if torch.version.cuda is None or not glob.glob(nodes) or torch.cuda.is_available():
        return ""
    try:
        torch._C._cuda_init()  # raises with the driver's reason where is_available() only warns
    except Exception as error:  # noqa: BLE001  (the reason is the answer)
        return (str(error).strip().splitlines() or [type(error).__name__])[0][:400]
    return ""


def _builds(side: Side) -> Callable[[Call, str], Extension]:
    """How the Builder asks for a build the cache lacks: a `BuildRequest`, answered by `BuildAnswer`."""
    def ask(call: Call, mode: str) -> Extension:
        command = side.exchange(BuildRequest(call=call, mode=mode))
        if not isinstance(command, BuildAnswer):
            raise RuntimeError(f"the caller answered a build request with {command.tag}")
        return command.extension
    return ask


def compile_call(side: Side, command: Compile) -> Compiled:
    """Builder side: build a candidate's load_inline call in the builder's scratch space, without loading it."""
    os.environ["TORCH_CUDA_ARCH_LIST"] = command.call.arch  # as the candidate's worker keyed it (compile_entry checks)
    return Compiled(extension=compile_entry(command.call, command.directory, command.light_build, command.mode,
                                            command.header))


def prepare(side: Side, command: Prepare) -> Prepared:
    """Build what every light build shares (the precompiled torch header) ahead of the first check, in a builder that
    compiles nothing of a candidate's."""
    os.environ["TORCH_CUDA_ARCH_LIST"] = os.environ.get("TORCH_CUDA_ARCH_LIST") or _local_arch("9.0")  # as build
    shared = Path(command.header) if command.header else None
    return Prepared(header=str(light.prepare(Path(command.cache_dir), cpp_extension.load_inline, shared)))


EXPECTED_ON_GPU = 0.05  # the share of the GPU's memory a reference worker may keep expected outputs and inputs in
KEPT_ON_HOST = 1 << 30  # on the CPU: bytes of expected outputs and inputs a reference worker keeps
KEEP_VARIABLE = "DICE_HARNESS_KEEP_BYTES"  # overrides either bound (0: keep nothing, make every trial again)


def reference(side: Side, command: MakeReference) -> ReferenceMade:
    """Build Model after the seed, make every trial's inputs from its seed, keep the expected outputs.

    Kept while they fit (EXPECTED_ON_GPU of the GPU's memory, KEPT_ON_HOST on the CPU): compare then reads them in
    place at every check of a kept reference (5120x5120 outputs: 0.7 GB made again each time otherwise). Past that,
    nothing of a trial is kept: compare makes its inputs again from the seed and runs the reference again, one
    trial at a time, so an 8.6 GB problem never holds more than one trial's inputs and outputs here."""
    options = side.options = command.options
    side.device = pick_device(options.device)
    runtime.set_precision(options.tf32, options.cudnn_tf32)
    module = side.module = load_module(command.path, "dice_reference")
    side.model = _model(module, module.Model, options.seed, side.device)
    total = torch.cuda.get_device_properties(side.device).total_memory if side.device.type == "cuda" else 0
    room = float(os.environ.get(KEEP_VARIABLE) or (EXPECTED_ON_GPU * total if total else KEPT_ON_HOST))
    side.trials, side.expected, dtypes = [], [], set()
    with torch.no_grad(), _plain_oom(side, "making the reference's expected outputs"):
        for seed in [*verify.trial_seeds(options.seed, options.correctness_trials),
                     options.seed + verify.CHANGED_SEED_OFFSET]:
            inputs, _where = verify.make_inputs(module, seed, side.device)
            values = verify.flatten(side.model(*inputs))
            side.trial_bytes = _bytes(inputs) + _bytes(values)
            dtypes |= {str(v.dtype) for v in values}
            size = _bytes(values) + _bytes(inputs)
            keep = size <= room
            room -= size if keep else 0
            side.trials.append((seed, inputs if keep else None))
            side.expected.append(verify.copies(values, side.device.type == "cuda") if keep else None)
            del inputs, values
    side.expected_changed = side.expected.pop()
    side.changed_trial = side.trials.pop()
    _give_back(side)
    return ReferenceMade(device=_device_name(side.device), **runtime.precision_state(), dtypes=tuple(sorted(dtypes)),
                         trial_bytes=side.trial_bytes, device_bytes=int(total))


def _give_back(side: Side) -> None:
    """Return the GPU memory of trials not kept to the driver (torch's allocator would hold it): the solution's
    worker needs it for the same trials, on the same GPU, at the same time."""
    if side.device.type == "cuda" and any(inputs is None for _seed, inputs in side.trials):
        torch.cuda.empty_cache()


@contextlib.contextmanager
def _plain_oom(side: Side, what: str) -> Iterator[None]:
    """A GPU out of memory, said in numbers (`verify.out_of_memory`) instead of torch's allocator dump."""
    try:
        yield
    except torch.cuda.OutOfMemoryError:
        side.outputs = None
        raise MemoryError(verify.out_of_memory(what, side.trial_bytes, side.device)) from None


def _model(module: Any, cls: Any, seed: int, device: torch.device) -> Any:
    """`cls(*get_init_inputs())` on `device`, the seed set before each (both sides make the same model)."""
    torch.manual_seed(seed)
    init = list(module.get_init_inputs()) if hasattr(module, "get_init_inputs") else []
    torch.manual_seed(seed)
    return cls(*init).to(device).eval()


def _bytes(values: list[Any]) -> int:
    return sum(t.numel() * t.element_size() for t in values if isinstance(t, torch.Tensor))


def trial_inputs(side: Side, index: int) -> list[Any]:
    """A reference worker's trial inputs: the kept ones, or made again from the trial's seed."""
    seed, inputs = side.changed_trial if index == len(side.trials) else side.trials[index]
    return inputs if inputs is not None else verify.make_inputs(side.module, seed, side.device)[0]


def _expected(side: Side, index: int) -> list[torch.Tensor]:
    """The expected outputs of a trial (index len(trials): the changed inputs'): kept, or made again."""
    kept = side.expected_changed if index == len(side.trials) else side.expected[index]
    if kept is not None:
        return kept
    with torch.no_grad():
        return verify.flatten(side.model(*trial_inputs(side, index)))


BASE_BYTES = 512 << 20  # what the trials' inputs kept for timing (`timing.Watch`) may take, past two trials


def run(side: Side, command: RunSolution) -> Ran:
    """Build ModelNew after the same seed (the first call) and run trials on inputs made here from their seeds:
    `command.trials` (None: every one), then, with `command.changed`, the first trial again on changed inputs. A
    check whose trials do not fit the GPU together runs them a call each, the outputs of one call compared before
    the next (`pipeline`); the state between calls is `side.run`.

    Also: what forward returned (plain tensors?), which inputs it wrote into, which threads and processes the
    solution started and when (import, __init__, forward), and copies of the trials' inputs, taken before forward
    could write into them, for the timed calls to mix (`bases`)."""
    if side.run is None:
        before, started = _first_run(side, command)
    else:
        before, started = runtime.precision_state(), []
    state = side.run
    assert state is not None
    sharing = command.share and side.device.type == "cuda"
    seeds = verify.trial_seeds(side.options.seed, side.options.correctness_trials)
    indices = range(len(seeds)) if command.trials is None else command.trials
    outputs, mutated, lazy, count, changed_out = [], set(), "", 0, []
    with torch.no_grad(), _plain_oom(side, "running the solution's trials"):
        for index in indices:
            result, wrote, made_lazy = _trial(side, state, seeds, index)
            lazy, mutated = lazy or made_lazy, mutated | wrote
            outputs.append(verify.copies(result, sharing))
            side.trial_bytes += _bytes(outputs[-1])
            del result
        if command.changed:
            count, result, wrote, made_lazy = _changed_trial(side, state)
            lazy, mutated = lazy or made_lazy, mutated | wrote
            changed_out = verify.copies(result, sharing)
            del result
        if side.device.type == "cuda":
            torch.cuda.synchronize()
    started += described(runtime.started_since(state.census, state.seen), "in forward")
    side.census = state.census = {**state.census, **runtime.census()}  # each start is reported once
    side.outputs = {"trials": outputs, "changed": changed_out}
    handed = _hand_over(side, Path(command.outputs), sharing)
    after = runtime.precision_state()
    return Ran(device=_device_name(side.device), changed_tensors=count, threads=tuple(started),
               precision_before=before, precision_after=after, outputs=handed,
               inputs="device" if state.made == {"device"} else "host", mutated=tuple(sorted(mutated)), lazy=lazy,
               tampered=tuple(SEAL.broken()), bases=len(side.bases))


def _first_run(side: Side, command: RunSolution) -> tuple[Any, list[str]]:
    """The first call of a check: the device, the precision, ModelNew built after the seed, and what it started at
    import and in __init__. Returns the precision as it was before and those starts."""
    options = side.options
    side.device = pick_device(options.device)
    runtime.set_precision(options.tf32, options.cudnn_tf32)
    before = runtime.precision_state()
    census = side.census if side.census is not None else runtime.baseline(options.device)
    started = described(runtime.started_since(census), "at import")
    reference = load_module(command.reference, "dice_inputs")
    side.model = _model(reference, side.module.ModelNew, options.seed, side.device)
    seen = runtime.census()
    started += described(runtime.started_since(census, seen), "in __init__")
    side.run = RunState(reference=reference, census=census, seen=seen)
    side.bases, side.trials = [], []
    return before, started


def _trial(side: Side, state: RunState, seeds: list[int], index: int) -> tuple[list[Any], set[int], str]:
    """Trial `index` on inputs made here from its seed: its flattened outputs, the inputs forward wrote into, and
    what it returned that is not a plain tensor ("": all plain)."""
    tensors, where = verify.make_inputs(state.reference, seeds[index], side.device)
    state.made.add(where)
    side.trial_bytes = _bytes(tensors)
    copies = [verify.clone(t) for t in tensors]  # before forward may write into its inputs
    keep_base(side.bases, copies)
    if index == 0:  # timed and inspected later, and changed in place below
        state.first, side.trials = tensors, [(seeds[0], copies)]
    flat, mutated, lazy = _forward(side, tensors, copies)
    if index == 0 and not lazy:  # what the profiled forwards must compute again (`inspect`)
        side.verified = verify.sample(flat)
    if state.held is not None and _bytes(tensors) <= state.room:
        state.held.append(tensors)  # alive to the end: the next trial's inputs get other addresses
        state.room -= _bytes(tensors)
    return flat, mutated, lazy


def _changed_trial(side: Side, state: RunState) -> tuple[int, list[Any], set[int], str]:
    """The first trial again, its inputs changed in place (same tensors, new values): how many tensors changed, the
    flattened outputs, the inputs forward wrote into, and what it returned that is not a plain tensor."""
    first = state.first
    changed, _where = verify.make_inputs(state.reference, side.options.seed + verify.CHANGED_SEED_OFFSET,
                                         side.device)
    count = verify.change_in_place(first, changed)
    del changed
    flat, mutated, lazy = _forward(side, first, [verify.clone(t) for t in first])
    state.first = state.held = None
    return count, flat, mutated, lazy


def _forward(side: Side, tensors: list[Any], copies: list[Any]) -> tuple[list[Any], set[int], str]:
    """ModelNew on `tensors` (`copies`: theirs, taken before): its flattened outputs, the inputs it wrote into, and
    what it returned that is not a plain tensor ("": all plain)."""
    result = side.model(*tensors)
    lazy = verify.plain(result, side.device)
    mutated = {i for i, (a, b) in enumerate(zip(copies, tensors)) if not verify.same(a, b)}
    return verify.flatten(result), mutated, lazy


def keep_base(bases: list[list[Any]], inputs: list[Any]) -> None:
    """Keep one trial's inputs for the timed calls to mix: the first two always, more while all fit BASE_BYTES.
    Both sides keep by this rule, so the reference worker's bases are the solution's."""
    if len(bases) < 2 or sum(_bytes(b) for b in bases) + _bytes(inputs) <= BASE_BYTES:
        bases.append(inputs)


def described(found: dict[str, str], when: str) -> list[str]:
    return [f"{key} '{name}' ({when})" for key, name in found.items()]


def _hand_over(side: Side, exchange: Path, sharing: bool) -> str:
    """Hand `side.outputs` to the reference worker: CUDA IPC handles in outputs.json when every output is on the GPU,
    else (or when sharing fails) host copies in outputs.pt. Says which. What an earlier call of this check left there
    goes first: the reference reads outputs.pt where there is one, and a check whose trials run a call each once
    read the last call's file fallback (1 trial) against the next call's trials (none: only the changed inputs)."""
    for name in ("outputs.pt", "outputs.json"):
        (exchange / name).unlink(missing_ok=True)
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
INSPECT_KEEP_BYTES = 1 << 30  # the profiled calls' outputs kept to check (`inspect`); past this, the latest ones


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
    indices = range(len(side.trials)) if command.trials is None else command.trials
    if len(got["trials"]) != len(indices) or not all(0 <= i < len(side.trials) for i in indices):
        raise ValueError(f"{len(got['trials'])} trials' outputs handed over for trials {list(indices)}")
    norms = []
    for index, outputs in zip(indices, got["trials"]):
        expected = _expected(side, index)  # one trial at a time: made again when too large to keep
        trials.append(TrialResult(seed=side.trials[index][0], **verify.compare(outputs, expected, atol, rtol, device)))
        norms += [verify.norm(t, device) for t in expected]
        del expected
    if command.changed:
        changed = verify.compare(got["changed"], _expected(side, len(side.trials)), atol, rtol, device)
        trials.append(TrialResult(seed=side.changed_trial[0], **changed, changed_inputs=True))
    _give_back(side)
    if side.itself is None:
        side.itself = _itself(side, device)
    unstable, mutates = side.itself
    return Compared(trials=tuple(trials), reference_norm=max(norms) if norms else 0.0, unstable=unstable,
                    mutates=mutates)


def _itself(side: Side, device: torch.device | None) -> tuple[str, tuple[int, ...]]:
    """Run the reference twice on copies of the first trial's inputs: whether it agrees with itself (a reference
    that does not is no target for any solution: its own second run would "mismatch"), and which inputs it writes
    into (a solution may then write into them too). Once per reference worker."""
    _seed = side.trials[0][0]
    inputs = trial_inputs(side, 0)
    runs, mutates = [], set()
    with torch.no_grad():
        for _ in range(2):
            given = [verify.clone(t) for t in inputs]
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
    wrong = ""
    if side.work is None or not side.expected:  # the solution's worker inspects once, a reference's keeps it
        inputs = trial_inputs(side, 0) if side.expected else side.trials[0][1]
        given = [verify.clone(t) for t in inputs]  # forward may write into them
        calls: list[Any] = []

        def forward() -> None:  # runs inside the profiler's ranges: as little of its own as can be
            out = side.model(*given)
            if _profiled():  # the calls whose work the profile describes
                calls.append(out)
                if len(calls) > 1 and len(calls) * _bytes(verify.flatten(out)) > INSPECT_KEEP_BYTES:
                    del calls[0]  # the same inputs each call: outputs of one size

        side.work = runtime.work(forward, list(command.kernels), getattr(side.module, "__file__", "") or "",
                                 side.device)
        side.work["output_bytes"] = _bytes(verify.flatten(calls[-1])) if calls else 0
        if side.expected and side.device.type == "cpu":  # a reference worker: no candidate's code in it
            side.work["page_us"] = runtime.page_cost_us()
        if side.verified is not None and all(verify.same(a, b) for a, b in zip(inputs, given)):
            # every profiled call kept, against the first trial's verified outputs, at positions drawn back then
            wrong = next((w for w in (verify.matches(verify.flatten(call), side.verified, side.options.atol,
                                                     side.options.rtol) for call in calls) if w), "")
        del calls
    found = side.work
    rows = tuple(KernelShare(**row) for row in found["rows"])
    lines = tuple(LibraryLine(**line) for line in found["lines"])
    cuda = side.device.type == "cuda"
    return Inspected(kernels=rows if cuda else (), operators=() if cuda else rows, lines=lines,
                     own_share=found["own_share"], streams=found["streams"], profiled_ms=found["profiled_ms"],
                     plain_ms=found["plain_ms"], profiled_wrong=wrong, profiled_faults=found["profiled_faults"],
                     plain_faults=found["plain_faults"], output_bytes=found["output_bytes"],
                     page_us=found.get("page_us", 0.0))


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


_profiled = torch.autograd._profiler_enabled  # bound at import, before any code of the candidate's runs
SEAL = integrity.Seal()  # the harness as loaded: before any command, so before any code of the candidate's
