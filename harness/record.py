"""What a check has found so far, field by field as its `Report` will carry it: each stage writes the fields it
owns, and the check's end makes the Report from them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from dice_lsp.anatomy.types import Finding

from dice_lsp.harness.report import Diagnostic, KernelShare, Report, Stage, Status, Timing, Trial


@dataclass
class Record:
    """A check in progress: the stages run and the findings made, and every other field of its Report."""

    stages: list[Stage] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    static_findings: tuple[Finding, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()
    trials: tuple[Trial, ...] = ()
    kernels: tuple[KernelShare, ...] = ()
    timings: dict[str, Timing] = field(default_factory=dict)
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    tf32: bool = False
    cudnn_tf32: bool = False
    device: str = ""
    build_cached: bool = False
    build_mode: str = ""
    background_cpu_ms: float = 0.0

    def stage(self, name: str, started: float, status: str = "ok", detail: str = "") -> None:
        """Stage `name` ended now, begun at `started` (time.perf_counter)."""
        self.stages.append(Stage(name, status, round(time.perf_counter() - started, 4), detail))  # type: ignore[arg-type]

    def ran(self, name: str) -> bool:
        return any(stage.name == name for stage in self.stages)

    @property
    def cuda(self) -> bool:
        return self.device not in ("", "cpu")

    def report(self, status: Status, message: str = "", log: str = "") -> Report:
        return Report(status=status, message=message, stages=tuple(self.stages), diagnostics=self.diagnostics,
                      trials=self.trials, findings=tuple(self.findings), static_findings=self.static_findings,
                      kernels=self.kernels, timings=dict(self.timings), speedup_eager=self.speedup_eager,
                      speedup_compile=self.speedup_compile, tf32=self.tf32, cudnn_tf32=self.cudnn_tf32,
                      device=self.device, build_cached=self.build_cached, build_mode=self.build_mode,
                      background_cpu_ms=round(self.background_cpu_ms, 1), log=log)
