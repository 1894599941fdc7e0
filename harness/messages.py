"""The messages between the caller and its worker processes: one frozen dataclass per command and per reply.

Each travels as one JSON line, never pickled: a worker runs the candidate, so its replies are data that is checked
field by field against its class here; a line that does not decode raises `MessageError`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

from dice_lsp.harness.build import Call, Extension
from dice_lsp.harness.codec import MessageError, from_json, plain, short
from dice_lsp.harness.options import Options
from dice_lsp.harness.report import KernelShare
from dice_lsp.harness.samples import TimedRound


# -- worker -> caller ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cost:
    """Where one command's time went in the worker, for benchmarks: this command alone, the modules it imported,
    and the warm-up the worker did before its first command (and what failed there, if anything)."""

    seconds: float = 0.0
    imported: int = 0
    warm_up_seconds: float = 0.0
    warm_up_error: str = ""


@dataclass(frozen=True, kw_only=True)
class Reply:
    tag: ClassVar[str] = ""
    interim: ClassVar[bool] = False  # sent while a command runs, before its answer (the command is still owed)
    cost: Cost = Cost()  # filled in by the worker's loop, not by the stage
    refused: tuple[str, ...] = ()  # by the worker's loop: sockets its sandbox refused since its last reply (as it saw)


@dataclass(frozen=True)
class BuildRequest(Reply):
    """During a Build: a load_inline call the cache does not hold. The caller has a builder worker make it (this
    worker cannot write the cache) and answers with `BuildAnswer` on the worker's stdin; "plain" `mode` asks for
    the plain build after the light one did not load."""

    tag: ClassVar[str] = "build-request"
    interim: ClassVar[bool] = True
    call: Call
    mode: str = ""


@dataclass(frozen=True)
class Compiled(Reply):
    """A builder worker's answer: what the build of one cache entry did."""

    tag: ClassVar[str] = "compiled"
    extension: Extension


@dataclass(frozen=True)
class Failed(Reply):
    """The stage raised (the candidate may raise anything, SystemExit included)."""

    tag: ClassVar[str] = "failed"
    error: str
    traceback: str = ""
    extensions: tuple[Extension, ...] = ()  # what the build did so far, when the failure came after it began


@dataclass(frozen=True)
class Built(Reply):
    tag: ClassVar[str] = "built"
    extensions: tuple[Extension, ...]
    arch: str
    cuda_available: bool
    has_model_new: bool
    cuda_error: str = ""  # why CUDA did not start though the GPU's device nodes are here (`stages.cuda_failure`)


@dataclass(frozen=True)
class Prepared(Reply):
    tag: ClassVar[str] = "prepared"
    header: str  # the precompiled torch header's path (without .gch)


@dataclass(frozen=True)
class ReferenceMade(Reply):
    """Model is built and every trial ran; the expected outputs stay in the worker (or are made again at compare
    time, when they are too large to keep)."""

    tag: ClassVar[str] = "reference-made"
    device: str
    tf32: bool
    cudnn_tf32: bool
    matmul_precision: str
    dtypes: tuple[str, ...]  # of the expected outputs
    trial_bytes: int = 0  # one trial's inputs and expected outputs
    device_bytes: int = 0  # the GPU's memory (0 on the CPU)


@dataclass(frozen=True)
class Ran(Reply):
    """The solution ran every trial; its outputs wait for the reference worker, "shared" by CUDA IPC or in a "file"."""

    tag: ClassVar[str] = "ran"
    device: str
    changed_tensors: int
    threads: tuple[str, ...]  # threads and processes the solution started and left running, and when
    precision_before: dict[str, Any]
    precision_after: dict[str, Any]
    outputs: str  # "shared" | "file"
    inputs: str  # where get_inputs made them: "device" (on the GPU itself) or "host" (then moved)
    mutated: tuple[int, ...] = ()  # the inputs (by position) forward wrote into
    lazy: str = ""  # why an output was not a plain, materialised tensor ("" when all were)
    tampered: tuple[str, ...] = ()  # harness code or clocks bound differently since the worker started
    bases: int = 0  # trials' inputs kept for the timed calls to mix


@dataclass(frozen=True)
class OutputsSaved(Reply):
    tag: ClassVar[str] = "outputs-saved"


@dataclass(frozen=True)
class TrialResult:
    """One trial compared (as `verify.compare` says it), with the seed that made its inputs."""

    seed: int
    passed: bool
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    where: str = ""
    relative_l2: float = 0.0
    note: str = ""
    dtype_notes: tuple[str, ...] = ()
    changed_inputs: bool = False


@dataclass(frozen=True)
class Compared(Reply):
    """Every trial compared; or `unshared` says why the outputs shared by CUDA IPC could not be opened (the caller
    asks the solution worker for a file then)."""

    tag: ClassVar[str] = "compared"
    trials: tuple[TrialResult, ...] = ()
    reference_norm: float = 0.0
    unshared: str = ""
    unstable: str = ""  # how the reference disagreed with itself on the same inputs ("" when it did not)
    mutates: tuple[int, ...] = ()  # the inputs (by position) the reference itself writes into


@dataclass(frozen=True)
class Output:
    """One staged output tensor: its dtype (torch's name without "torch.") and shape."""

    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Called(Reply):
    """During a watched Time: timed call `index` ended and its outputs are staged (`timing.Staging`: the worker's
    staging file on the CPU, its staging buffer on a GPU), laid out as `outputs`; -1 before the first call. The
    caller takes a copy of those it keeps, then answers with the next call's `Next`. `staging`: the GPU buffer's
    CUDA IPC description when it is new (the reference worker opens it); `lazy`: why nothing was staged."""

    tag: ClassVar[str] = "called"
    interim: ClassVar[bool] = True
    index: int
    outputs: tuple[Output, ...] = ()
    staging: tuple[dict[str, Any], ...] = ()
    lazy: str = ""


@dataclass(frozen=True)
class TimedCall:
    """One timed call the caller kept: its round, its place in the round, its inputs as the caller drew them (a mix
    of trials `first` and `second` with the weights of `seed`, `timing.weights`), where its copy lies (`slot`) and
    the outputs' layout the solution's worker said it staged."""

    round: int
    index: int
    first: int
    second: int
    seed: int
    slot: int
    outputs: tuple[Output, ...]


@dataclass(frozen=True)
class Snapshotted(Reply):
    """The reference worker holds a copy of the staged outputs (GPU)."""

    tag: ClassVar[str] = "snapshotted"


@dataclass(frozen=True)
class LibraryLine:
    """PyTorch's part of forward's time from one line of the solution's file (0: called from C++)."""

    line: int
    names: tuple[str, ...]  # the kernels (GPU) or operators (CPU)
    time_us: float
    share: float


@dataclass(frozen=True)
class Inspected(Reply):
    """Who did forward's work: GPU kernels, or on the CPU operators (the solution's own code as one row)."""

    tag: ClassVar[str] = "inspected"
    kernels: tuple[KernelShare, ...]
    operators: tuple[KernelShare, ...] = ()
    lines: tuple[LibraryLine, ...] = ()
    own_share: float = 0.0
    streams: int = 0  # CUDA streams forward's kernels ran on
    profiled_ms: float = 0.0  # one profiled forward: its kernels' time (GPU), its CPU time (CPU); 0: not known
    plain_ms: float = 0.0  # CPU: one forward's CPU time with no profiler on, in the same stage; 0: not known
    profiled_wrong: str = ""  # how an inspected call's outputs differ from the verified ones on the same inputs
    profiled_faults: int = 0  # CPU: the page faults of the forward `profiled_ms` is of
    plain_faults: int = 0  # CPU: the page faults of the forward `plain_ms` is of
    output_bytes: int = 0  # one forward's outputs
    page_us: float = 0.0  # a reference worker's: CPU microseconds a fresh page costs here (runtime.page_cost_us)


@dataclass(frozen=True)
class Timed(Reply):
    tag: ClassVar[str] = "timed"
    timing: TimedRound
    tf32: bool
    cudnn_tf32: bool
    matmul_precision: str
    lazy: str = ""  # why a timed call's output was not a plain, materialised tensor
    threads: tuple[str, ...] = ()  # threads and processes started while timed
    tampered: tuple[str, ...] = ()


# -- caller -> worker ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Command:
    tag: ClassVar[str] = ""
    answer: ClassVar[type[Reply]] = Reply  # the reply it gets unless it fails
    interims: ClassVar[tuple[type[Reply], ...]] = ()  # replies it may send while it runs, each answered on stdin


@dataclass(frozen=True)
class Build(Command):
    """Import the solution: its load_inline calls build (or load from the cache)."""

    tag: ClassVar[str] = "build"
    answer: ClassVar[type[Reply]] = Built
    interims: ClassVar[tuple[type[Reply], ...]] = (BuildRequest,)
    path: str
    options: Options
    arch: str = "9.0"  # TORCH_CUDA_ARCH_LIST when neither the environment nor a GPU here says


@dataclass(frozen=True)
class Prepare(Command):
    """To a builder that compiles nothing of a candidate's: build the precompiled torch header every light build of
    plain flags shares, under `cache_dir` (its own scratch; the caller copies it into the cache), unless the shared
    folder `header` (read-only) holds it already."""

    tag: ClassVar[str] = "prepare"
    answer: ClassVar[type[Reply]] = Prepared
    cache_dir: str
    header: str = ""


@dataclass(frozen=True)
class Compile(Command):
    """To a builder worker: build one call in `directory` (its own scratch space), never loading it; `call` comes
    from the candidate's worker and is only data here. The caller copies the library into the cache once the builder
    has ended. `header`: the cache's shared precompiled-header folder, which the builder may only read ("": none)."""

    tag: ClassVar[str] = "compile"
    answer: ClassVar[type[Reply]] = Compiled
    call: Call
    directory: str
    light_build: bool = True
    mode: str = ""
    header: str = ""


@dataclass(frozen=True)
class BuildAnswer(Command):
    """The caller's answer to a `BuildRequest`, read by the candidate's worker inside its Build; owes no reply."""

    tag: ClassVar[str] = "build-answer"
    answer: ClassVar[type[Reply]] = Reply
    extension: Extension


@dataclass(frozen=True)
class MakeReference(Command):
    """Build Model after the seed, make every trial's inputs from its seed, keep the expected outputs; `exchange`
    is the folder outputs are handed over in."""

    tag: ClassVar[str] = "reference"
    answer: ClassVar[type[Reply]] = ReferenceMade
    path: str
    options: Options
    exchange: str


@dataclass(frozen=True)
class RunSolution(Command):
    """Build ModelNew after the same seed and run every trial on inputs made here from the trial's seed by the
    reference's get_inputs (`verify.make_inputs`); `share`: hand the outputs over by CUDA IPC."""

    tag: ClassVar[str] = "run"
    answer: ClassVar[type[Reply]] = Ran
    reference: str  # the reference's input recipe (`process.input_recipe`): its get_init_inputs and get_inputs
    share: bool = False
    trials: tuple[int, ...] | None = None  # which trials this call runs; None: every one
    changed: bool = True  # and then the first trial again on changed inputs
    outputs: str = ""  # the folder to write outputs.pt or outputs.json into; "": exchange


@dataclass(frozen=True)
class SaveOutputs(Command):
    tag: ClassVar[str] = "save-outputs"
    answer: ClassVar[type[Reply]] = OutputsSaved
    exchange: str


@dataclass(frozen=True)
class Compare(Command):
    """Reference side: compare the trials' outputs (and, once a worker, run the reference twice on the same
    inputs: does it agree with itself, which inputs does it write into)."""

    tag: ClassVar[str] = "compare"
    answer: ClassVar[type[Reply]] = Compared
    exchange: str
    trials: tuple[int, ...] | None = None  # the trials whose outputs were handed over; None: every one
    changed: bool = True  # and the changed inputs' outputs


@dataclass(frozen=True)
class Next(Command):
    """The caller's answer to `Called`, read inside the Time command: the next timed call's inputs (`timing.Draw`),
    or, after the last call, only leave to go on. Owes no reply."""

    tag: ClassVar[str] = "next"
    answer: ClassVar[type[Reply]] = Reply
    first: int = 0
    second: int = 0
    seed: int = 0


@dataclass(frozen=True)
class Snapshot(Command):
    """Reference side (GPU): copy the solution's staged outputs (`Called.staging`, opened by CUDA IPC once per
    buffer) laid out as `outputs` into this worker's own memory as `slot`, before the solution's worker goes on."""

    tag: ClassVar[str] = "snapshot"
    answer: ClassVar[type[Reply]] = Snapshotted
    slot: int
    outputs: tuple[Output, ...]
    staging: tuple[dict[str, Any], ...] = ()  # a new buffer's description: open it first


@dataclass(frozen=True)
class CompareTimed(Command):
    """Reference side: run the reference on each kept timed call's inputs, made from the caller's record of them,
    and compare the copy taken of its outputs: `timed-<slot>.bin` in `exchange` (CPU), or the slot this worker
    holds (GPU, `Snapshot`)."""

    tag: ClassVar[str] = "compare-timed"
    answer: ClassVar[type[Reply]] = Compared
    exchange: str
    calls: tuple[TimedCall, ...]


@dataclass(frozen=True)
class Inspect(Command):
    tag: ClassVar[str] = "inspect"
    answer: ClassVar[type[Reply]] = Inspected
    kernels: tuple[str, ...] = ()  # the solution's kernel names, to tell its own kernels from torch's


@dataclass(frozen=True)
class Time(Command):
    """One timing round of forward. `trials` is exactly how many calls are timed (the caller holds the reply to
    it); `watch`: the round is watched (`timing.Watch`): each call's inputs are the
    caller's draw and its outputs are staged at `staging` (a path inside the worker's own scratch) for the caller,
    which answers each `Called` with the next draw; `threads`: the CPU's intra-op threads for both sides (0: as
    they are)."""

    tag: ClassVar[str] = "time"
    answer: ClassVar[type[Reply]] = Timed
    interims: ClassVar[tuple[type[Reply], ...]] = (Called,)
    trials: int  # exactly this many timed calls: the caller decides (`samples.round_trials`), the worker obeys
    warmup: int
    compiled: bool = False  # the reference under torch.compile
    warm_s: float = 0.0
    round: int = 0
    check: str | None = None  # the check this round belongs to: its inputs are copied once a check
    watch: bool = False
    staging: str = ""
    threads: int = 0


COMMANDS: dict[str, type[Command]] = {c.tag: c for c in (Build, Prepare, Compile, BuildAnswer, MakeReference,
                                                         RunSolution, SaveOutputs, Compare, Inspect, Time, Next,
                                                         Snapshot, CompareTimed)}
REPLIES: dict[str, type[Reply]] = {r.tag: r for r in (Failed, Built, Prepared, BuildRequest, Compiled, ReferenceMade,
                                                       Ran, OutputsSaved, Compared, Inspected, Timed, Called,
                                                       Snapshotted)}


# -- before the first command -----------------------------------------------------------------------------------------

LIMITS_VARIABLE = "DICE_HARNESS_LIMITS"  # the environment variable a worker reads its `Limits` from, at its start


@dataclass(frozen=True)
class Limits:
    """What a worker is held to and does before its first command: hard resource limits (0: none), its role, and the
    device whose CUDA context it creates while it waits (""; none)."""

    file_size_mb: int = 0
    cpu_time_s: int = 0
    memory_gb: float = 0.0  # address space, where no CUDA context needs terabytes of it
    processes: int = 0  # RLIMIT_NPROC: the user's processes now plus the worker's share, where no pids cgroup holds
    cuda: bool = False
    role: str = "solution"
    warm_device: str = ""


def encode_limits(limits: Limits) -> str:
    return json.dumps(plain(limits))


def decode_limits(text: str) -> Limits:
    try:
        raw = json.loads(text)
    except ValueError as error:
        raise MessageError(f"the worker's limits are not JSON ({short(str(error), 120)})") from None
    return from_json(Limits, raw, "limits")


# -- the wire ------------------------------------------------------------------------------------------------------
def encode_command(command: Command) -> str:
    return json.dumps({"op": command.tag, **plain(command)})


def encode_reply(reply: Reply) -> str:
    return json.dumps({"reply": reply.tag, **plain(reply)})


def decode_command(line: str | bytes) -> Command:
    return _decode_line(line, "op", COMMANDS, "command")


def decode_reply(line: str | bytes) -> Reply:
    return _decode_line(line, "reply", REPLIES, "reply")


def _decode_line(line: str | bytes, key: str, table: dict[str, type], what: str) -> Any:
    try:
        raw = json.loads(line)
    except (ValueError, RecursionError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise MessageError(f"the {what} is not JSON ({short(str(error), 120)})") from None
    if not isinstance(raw, dict):
        raise MessageError(f"the {what} is {type(raw).__name__}, not a JSON object")
    name = raw.pop(key, None)
    kind = table.get(name) if isinstance(name, str) else None
    if kind is None:
        raise MessageError(f"unknown {what} {short(name)}")
    return from_json(kind, raw, kind.tag)
