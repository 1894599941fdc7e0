"""Run-time deception findings, made from what the workers saw; codes shared with anatomy's static findings.

Pure functions over the workers' replies, so each rule is testable without running anything.
"""

from __future__ import annotations

from typing import Any, Sequence

from dice_lsp.anatomy.types import Anatomy, Finding, Span

from dice_lsp.harness.messages import Ran, TrialResult
from dice_lsp.harness.options import Options
from dice_lsp.harness.report import KernelShare


def from_trials(trials: Sequence[TrialResult], reference_dtypes: Sequence[str], options: Options,
                span: Span) -> list[Finding]:
    found: list[Finding] = []
    normal = [t for t in trials if not t.changed_inputs]
    changed = [t for t in trials if t.changed_inputs]
    if normal and all(t.passed for t in normal) and any(not t.passed for t in changed):
        found.append(Finding("output-cached", "wrong output after the inputs were changed in place (same tensors, "
                             "new values): forward returns a cached result", span, "error"))
    tiny = [t for t in trials if t.passed and t.relative_l2 > options.tiny_output_ratio]
    if tiny:
        worst = max(t.relative_l2 for t in tiny)
        found.append(Finding("tiny-output", f"passes allclose only because the outputs are tiny: the error is "
                             f"{worst:.0%} of the reference's norm", span, "error"))
    notes = sorted({note for t in trials for note in t.dtype_notes})
    if notes:
        found.append(Finding("precision", "; ".join(notes), span, "warning"))
    elif "torch.float32" in reference_dtypes and not tiny:
        passed = [t.relative_l2 for t in trials if t.passed]
        if passed and max(passed) > options.precision_ratio:
            found.append(Finding("precision", f"relative error {max(passed):.1e} against an fp32 reference is typical "
                                 "of TF32 or half-precision arithmetic inside", span, "information"))
    return found


def from_run(ran: Ran, options: Options, span: Span) -> list[Finding]:
    found: list[Finding] = []
    before, after = ran.precision_before, ran.precision_after
    changed = [k for k in before if before.get(k) != after.get(k)]
    if changed:
        what = ", ".join(f"{k} {before[k]} -> {after[k]}" for k in changed)
        found.append(Finding("precision", f"the solution changes precision settings the reference runs with: {what}",
                             span, "warning"))
    if ran.threads:
        found.append(Finding("thread", f"forward left threads running ({', '.join(ran.threads)}): work on another "
                             "thread escapes the timer", span, "warning"))
    return found


def from_kernels(kernels: Sequence[KernelShare], anatomy: Anatomy | None) -> list[Finding]:
    if anatomy is None:
        return []
    launched = {k.name for k in kernels if k.own}
    missing = [k for k in anatomy.kernels if k.name not in launched]
    severity = "error" if missing and not launched else "warning"
    return [Finding("kernel-not-launched", f"kernel {k.name} never launched during forward", k.name_span, severity)
            for k in missing]


def timer_mismatch(timing: dict[str, Any], span: Span) -> Finding:
    return Finding("timer-mismatch", f"CUDA events say {timing['median_ms']:.3f} ms but a device-wide synchronize "
                   f"takes {timing['host_median_ms']:.3f} ms: work escapes the timed stream; speedups use host time",
                   span, "warning")
