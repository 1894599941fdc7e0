"""The one typed result of checking a solution against its reference, consumed by the server, CLI, eval and RL.

A `Report` crosses process boundaries and is stored by eval, so it round-trips through `to_json` / `from_json`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from dice_lsp.anatomy.types import Finding, Related, Severity, Span

# The outcome of the whole check, best to worst is not an order: each names what stopped the pipeline.
Status = Literal[
    "correct",  # built, ran, matched the reference on every trial
    "mismatch",  # ran, but an output differs from the reference (or changes wrongly with its inputs)
    "built-not-run",  # built; not run because there is no GPU for a CUDA extension
    "compile-error",  # the compiler rejected the extension
    "crashed",  # the worker died (segfault, illegal memory access, OOM) or raised
    "timed-out",  # a stage ran past its time limit
    "cancelled",  # the caller cancelled the run
    "invalid",  # the files cannot be checked as given (no Model / ModelNew, reference fails, ...)
]
StageName = Literal["parse", "build", "gpu", "reference", "verify", "inspect", "time"]  # gpu: waited for its turn
StageStatus = Literal["ok", "failed", "timed-out", "skipped", "cancelled"]


@dataclass(frozen=True)
class Stage:
    """What one stage of build -> verify -> time -> inspect did and how long it took."""

    name: str
    status: StageStatus
    seconds: float = 0.0
    detail: str = ""


@dataclass(frozen=True)
class Diagnostic:
    """A compiler error or warning, placed in the Python file when it maps back into a source string."""

    severity: Severity
    message: str
    line: int  # 0-based line in the Python file (or in `file` when span is None)
    column: int  # 0-based column, in code points
    span: Span | None = None  # the offsets in the Python file, when the position maps into a source string
    file: str = ""  # the generated file the compiler named: "cuda.cu", "main.cpp", ...


@dataclass(frozen=True)
class Trial:
    """One correctness trial: a fresh seed, fresh inputs, every output compared element by element."""

    seed: int
    passed: bool
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    where: str = ""  # the worst element, e.g. "output[1][3, 17]"
    relative_l2: float = 0.0  # ||solution - reference|| / ||reference|| over all outputs
    note: str = ""  # why it failed when it is not a numeric difference (shape, dtype, NaN, ...)
    changed_inputs: bool = False  # the trial re-ran the same tensors after changing their values in place


@dataclass(frozen=True)
class Timing:
    """Timings of one side's forward, in milliseconds."""

    median_ms: float
    spread_ms: float  # interquartile range
    min_ms: float
    max_ms: float
    trials: int
    host_median_ms: float = 0.0  # host clock over a device-wide synchronize, per trial
    clock: str = "cuda-events"  # "cuda-events" or "host" (CPU mode)
    round_medians_ms: tuple[float, ...] = ()  # each round's own median: drift between rounds shows here
    rounds_left_out: int = 0  # rounds far slower than the others, left out of the median (samples.pool)
    slow_fraction: float = 0.0  # share of samples over twice the median (stalls, launches the timer caught)
    placements: int = 1  # copies of the inputs at different addresses, timed in turn (timing.placements)
    checked: int = 0  # timed calls whose outputs were compared with the reference's afterwards (rounds.py)


@dataclass(frozen=True)
class KernelShare:
    """One kernel's share of the solution's forward GPU time, from the profiler."""

    name: str  # the function name found inside the profiler's (mangled or demangled) kernel name
    share: float  # 0..1 of all GPU kernel time during forward
    time_us: float = 0.0
    launches: int = 0
    own: bool = True  # a kernel of the solution's own extension (False: torch / library kernels)


@dataclass(frozen=True)
class Report:
    """Everything a check found out; `status` says how far it got and `summary()` says it in one line."""

    status: Status
    message: str = ""
    stages: tuple[Stage, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()
    trials: tuple[Trial, ...] = ()
    findings: tuple[Finding, ...] = ()  # run-time findings (and "crash")
    static_findings: tuple[Finding, ...] = ()  # anatomy's findings on the solution, as the check saw it
    kernels: tuple[KernelShare, ...] = ()
    timings: dict[str, Timing] = field(default_factory=dict)  # "solution", "eager", "compile"
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    tf32: bool = False  # torch.backends.cuda.matmul.allow_tf32 on both sides
    cudnn_tf32: bool = False  # torch.backends.cudnn.allow_tf32 on both sides
    device: str = ""  # "NVIDIA H200" or "cpu"
    build_cached: bool = False  # the extension came from the build cache
    build_mode: str = ""  # "light" (split translation units) or "plain" (load_inline as written)
    background_cpu_ms: float = 0.0  # CPU the solution's processes used while its worker waited for the harness
    log: str = ""  # the tail of a crashed or failed worker's output

    @property
    def correct(self) -> bool:
        return self.status == "correct"

    @property
    def all_findings(self) -> tuple[Finding, ...]:
        return self.static_findings + self.findings

    @property
    def durations(self) -> dict[str, float]:
        return {stage.name: stage.seconds for stage in self.stages}

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == "error")

    def summary(self) -> str:
        """One line: status, errors, speedups and findings."""
        parts = [self.status]
        if self.status == "correct" and self.trials:
            worst = max(t.max_abs_error for t in self.trials)
            parts.append(f"{len(self.trials)} trials, max abs error {worst:.2g}")
        if self.speedup_eager is not None:
            parts.append(f"{self.speedup_eager:.2f}x vs eager")
        if self.speedup_compile is not None:
            parts.append(f"{self.speedup_compile:.2f}x vs torch.compile")
        if self.errors:
            first = self.errors[0]
            parts.append(f"line {first.line + 1}: {first.message}")
        elif self.message and self.status != "correct":
            parts.append(self.message)
        codes = sorted({f.code for f in self.all_findings})
        if codes:
            parts.append("findings: " + ", ".join(codes))
        return "; ".join(parts)

    def to_json(self) -> str:
        return json.dumps(_plain(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | dict[str, Any]) -> Report:
        raw = json.loads(text) if isinstance(text, str) else text
        return cls(
            status=raw["status"],
            message=raw.get("message", ""),
            stages=tuple(Stage(**s) for s in raw.get("stages", ())),
            diagnostics=tuple(_diagnostic(d) for d in raw.get("diagnostics", ())),
            trials=tuple(Trial(**t) for t in raw.get("trials", ())),
            findings=tuple(_finding(f) for f in raw.get("findings", ())),
            static_findings=tuple(_finding(f) for f in raw.get("static_findings", ())),
            kernels=tuple(KernelShare(**k) for k in raw.get("kernels", ())),
            timings={k: Timing(**{**v, "round_medians_ms": tuple(v.get("round_medians_ms", ()))})
                     for k, v in raw.get("timings", {}).items()},
            **{k: raw[k] for k in _SCALARS if k in raw},
        )


_SCALARS = ("speedup_eager", "speedup_compile", "tf32", "cudnn_tf32", "device", "build_cached", "build_mode",
            "background_cpu_ms", "log")


def _plain(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _span(raw: dict[str, int] | None) -> Span | None:
    return None if raw is None else Span(raw["start"], raw["end"])


def _diagnostic(raw: dict[str, Any]) -> Diagnostic:
    return Diagnostic(**{**raw, "span": _span(raw.get("span"))})


def _finding(raw: dict[str, Any]) -> Finding:
    related = tuple(Related(_span(r["span"]) or Span(0, 0), r["message"], bool(r.get("in_reference")))
                    for r in raw.get("related", ()))
    return Finding(raw["code"], raw["message"], _span(raw["span"]) or Span(0, 0), raw.get("severity", "warning"),
                   related=related)


__all__ = ["Diagnostic", "KernelShare", "Report", "Stage", "Status", "Timing", "Trial"]
