"""Run-time deception findings, made from what the workers saw; codes shared with anatomy's static findings.

Pure functions over the workers' replies, so each rule is testable without running anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from dice_lsp.anatomy.related import launches_of
from dice_lsp.anatomy.types import Anatomy, Finding, Related, Span

from dice_lsp.harness.messages import Ran, TrialResult
from dice_lsp.harness.options import Options
from dice_lsp.harness.report import KernelShare
from dice_lsp.harness.samples import Pooled


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


def from_run(ran: Ran, options: Options, span: Span, reference_mutates: Sequence[int] = ()) -> list[Finding]:
    """What the solution's worker saw while the trials ran: precision switches, threads and processes started,
    inputs written into (where the reference does not write into them), outputs that are no plain tensors, and
    harness code changed under it."""
    found: list[Finding] = []
    before, after = ran.precision_before, ran.precision_after
    changed = [k for k in before if before.get(k) != after.get(k)]
    if changed:
        what = ", ".join(f"{k} {before[k]} -> {after[k]}" for k in changed)
        found.append(Finding("precision", f"the solution changes precision settings the reference runs with: {what}",
                             span, "warning"))
    if ran.threads:
        found.append(threads(ran.threads, span))
    written = [i for i in ran.mutated if i not in reference_mutates]
    if written:
        which = ", ".join(f"input {i}" for i in written)
        found.append(Finding(INPUT_MUTATION, f"forward writes into its inputs ({which}), which the reference leaves "
                             "as they were: a caller's tensors change under it, and an output that is its input "
                             "saves the work of writing one", span, "warning"))
    if ran.lazy:
        found.append(lazy(f"forward returned {ran.lazy}", span))
    if ran.tampered:
        found.append(tampered(ran.tampered, span))
    return found


def from_kernels(kernels: Sequence[KernelShare], anatomy: Anatomy | None) -> list[Finding]:
    if anatomy is None:
        return []
    launched = {k.name for k in kernels if k.own}
    missing = [k for k in anatomy.kernels if k.name not in launched]
    severity = "error" if missing and not launched else "warning"
    return [Finding("kernel-not-launched", f"kernel {k.name} never launched during forward", k.name_span, severity,
                    launches_of(anatomy, k.name, "launched here, but this launch did not run during forward"))
            for k in missing]


def timer_mismatch(pooled: Pooled, span: Span) -> Finding:
    return Finding("timer-mismatch", f"CUDA events say {pooled.median_ms:.3f} ms but a device-wide synchronize "
                   f"takes {pooled.host_median_ms:.3f} ms: work escapes the timed stream; speedups use host time",
                   span, "warning")


def wall_time(pooled: Pooled, span: Span) -> Finding:
    return Finding("wall-time", f"forward's wall time ({pooled.host_median_ms:.3f} ms, median) is far above its CPU "
                   f"time ({pooled.median_ms:.3f} ms), which counts every thread of its process: it waits for "
                   "something the CPU clock does not see; its speed is less certain than usual", span, "warning")


def inspect_failed(error: str, span: Span) -> Finding:
    """The inspect stage (who did forward's work) raised: what it would have found is unknown, so is whether the
    timed speed is the kernel's own; a forward can raise there on purpose (it sees the profiler is on)."""
    return Finding(INSPECT_FAILED, f"the inspect stage failed: {error}; who did forward's work is unknown, so no "
                   "speedup is given", span, "error")


BACKGROUND_CPU_MS = 200.0  # CPU a solution's worker may use between its commands over a whole check


def background_cpu(used_ms: float, span: Span) -> list[Finding]:
    """CPU the solution's processes used between the harness's commands (while it waited, or timed another side):
    on a shared machine such work slows whatever else runs, eager's timing among it. An honest worker waits on its
    pipe: 0-30 ms over a check on the 2-core machine."""
    if used_ms <= BACKGROUND_CPU_MS:
        return []
    return [Finding("background-cpu", f"the solution's processes used {used_ms:.0f} ms of CPU between its commands, "
                    "when nothing was asked of them (a timer, a signal handler, a thread working in the background); "
                    "the worker is stopped while the other sides are timed", span, "warning")]


INPUT_MUTATION, LAZY_OUTPUT, TIMED_MISMATCH, TIMING_UNSTABLE = ("input-mutation", "lazy-output", "timed-mismatch",
                                                                "timing-unstable")
PROFILED_DIFFERENTLY, INSPECT_FAILED = "profiled-differently", "inspect-failed"
# no speedup is given with one of these
TIMING_ERRORS = ("timer-patch", LAZY_OUTPUT, TIMED_MISMATCH, PROFILED_DIFFERENTLY, INSPECT_FAILED)


def threads(started: Sequence[str], span: Span) -> Finding:
    return Finding("thread", f"the solution started threads or processes that were still running: "
                   f"{'; '.join(started)}; work on them escapes the timer", span, "warning")


def lazy(what: str, span: Span) -> Finding:
    return Finding(LAZY_OUTPUT, f"{what}: outputs must be plain, materialised torch.Tensors (a subclass can compute "
                   "its values when they are read, after the timer stopped); no speedup is given", span, "error")


def tampered(names: Sequence[str], span: Span) -> Finding:
    return Finding("timer-patch", f"the solution changed the harness's timing code or clocks in its worker "
                   f"({', '.join(names[:6])}{', ...' if len(names) > 6 else ''}); no speedup is given", span, "error")


def outside_clock(problems: Sequence[str], span: Span) -> Finding:
    return Finding("timer-patch", f"the solution's worker reported timings its caller's clock does not allow "
                   f"({'; '.join(problems[:3])}); no speedup is given", span, "error")


def timed_calls(results: Sequence[TrialResult], calls: Sequence[Any], span: Span) -> list[Finding]:
    """A timed call whose outputs differ from the reference's on the same (fresh) inputs: forward does other work
    when timed than when verified."""
    wrong = [(r, c) for r, c in zip(results, calls) if not r.passed]
    if not wrong:
        return []
    result, call = wrong[0]
    why = result.note or f"max abs error {result.max_abs_error:.3g}{' at ' + result.where if result.where else ''}"
    return [Finding(TIMED_MISMATCH, f"{len(wrong)} of {len(results)} timed calls checked afterwards differ from the "
                    f"reference on the same inputs (round {call.round}, call {call.index}: {why}): forward does "
                    "other work when timed than when verified; no speedup is given", span, "error")]


def unstable_rounds(name: str, medians: Sequence[float], span: Span) -> Finding:
    shown = ", ".join(f"{m:.4g}" for m in medians)
    return Finding(TIMING_UNSTABLE, f"the {name} timing rounds disagree (medians {shown} ms): another job is likely "
                   "using this machine, so the speedup is less certain than usual", span, "warning")


# A profiled forward may take this many times its timed median, plus the slack, before it is held to do other work
# when watched: on the CPU the profiler's bookkeeping of every operator makes honest forwards slower when profiled
# (200 tiny operators: 1.24x; the C++ loop: 1.01x); a GPU's kernel times are not inflated by the profiler, while the
# timed calls start with a flushed L2, so honest kernels come out no slower
PROFILED_RATIO = {"cpu": 4.0, "cuda": 3.0}
PROFILED_SLACK_MS = {"cpu": 0.05, "cuda": 0.01}


@dataclass(frozen=True)
class Faults:
    """What page faults explain of a CPU forward's time in the inspect stage: each fresh page costs `page_us` (the
    reference worker's measure of a fresh mapping's page, filling it included: a little above what a page the heap
    grows by costs, a leeway docs/THREATS.md states), for at most twice its outputs' pages (the
    outputs, one temporary of their size) and PAGE_FAULTS_FREE more. More faults than that explain nothing: a
    forward cannot buy itself room to compute by faulting pages in."""

    profiled: int = 0
    plain: int = 0
    output_bytes: int = 0
    page_us: float = 0.0

    def allowance_ms(self, faults: int) -> float:
        pages = 2 * -(-self.output_bytes // 4096) + PAGE_FAULTS_FREE
        return min(faults, pages) * self.page_us / 1e3


PAGE_FAULTS_FREE = 64


def profiled_differently(profiled_ms: float, plain_ms: float, timed_ms: float | None, cuda: bool,
                         span: Span, faults: Faults = Faults()) -> list[Finding]:
    """A forward that took far longer in the inspect stage, which learns who did the work, than while timed: it can
    see the profiler is on (torch.autograd._profiler_enabled) and does its own work only then, or from then on, so
    the profile's shares and the timed speed describe different code. `profiled_ms`: a profiled forward;
    `plain_ms` (CPU): one run after those, the profiler off; either may take what its page faults explain
    (`faults`) beyond the bound. No speedup is given."""
    if not timed_ms:
        return []
    kind = "cuda" if cuda else "cpu"
    bound = PROFILED_RATIO[kind] * timed_ms + PROFILED_SLACK_MS[kind]
    clock = "its kernels' GPU time" if cuda else "CPU time"
    for took, when, faulted in ((profiled_ms, "while profiled", faults.profiled),
                                (plain_ms, "after it was profiled", faults.plain)):
        if took > bound + faults.allowance_ms(faulted):
            paged = (f", {faulted} fresh pages of it ({faults.allowance_ms(faulted):.3g} ms allowed for them)"
                     if faulted else "")
            return [Finding(PROFILED_DIFFERENTLY, f"forward took {took:.3g} ms ({clock}) {when}{paged} and "
                            f"{timed_ms:.3g} ms while timed, {took / timed_ms:.1f} times as long: it does other work "
                            "when it is watched than when it is timed; no speedup is given", span, "error")]
    return []


def profiled_outputs(wrong: str, span: Span) -> list[Finding]:
    """The outputs of a profiled forward (drawn after the calls ran) against the solution's own verified outputs on
    the same inputs: a forward that sees the profiler and returns anything while launching its kernels on nothing
    would otherwise show a profile of its own code for work PyTorch did when it counted."""
    if not wrong:
        return []
    return [Finding(PROFILED_DIFFERENTLY, f"forward computed something else while profiled than when verified on "
                    f"the same inputs ({wrong}): it does other work when it is watched; no speedup is given",
                    span, "error")]


MIX_SHARE = 0.05  # own kernels doing at least this part of the reference's work PyTorch did not: a mix
# Own kernels under this share of forward's time are no mix whatever the reference ran besides: on the H100
# (2026-12-07) a kernel on a 32-element dummy, 0.9 % of the GPU time beside PyTorch's add, was taken for a mix
# because the reference's profile held a kernel the solution's did not
OWN_FLOOR = 0.02


def from_work(solution: Any, reference: Any, anatomy: Anatomy | None, text: str, span: Span,
              cuda: bool) -> list[Finding]:
    """Who did forward's work. With most of it in PyTorch's kernels (GPU) or operators (CPU): a mix, information,
    when the reference's kernels PyTorch did not run here took time the solution's own kernels could plausibly have
    spent doing them (at least MIX_SHARE of it: a cuBLAS matmul followed by the solution's own epilogue); else a
    fallback, a warning on the line that calls PyTorch: the reference's work done by PyTorch, the solution's own
    kernels only beside it (the issue's case: its kernel on a 32-element dummy, 1.5 % of the GPU time)."""
    rows = solution.kernels if cuda else solution.operators
    library = [r for r in rows if not r.own]
    share = sum(r.share for r in library)
    if not library or share <= 0.5:
        return []
    ours = {r.name for r in library}
    uncovered = sum(r.time_us for r in (reference.kernels if cuda else reference.operators)
                    if not r.own and r.name not in ours)
    own = sum(r.time_us for r in rows if r.own)
    kind, unit = ("kernels", "GPU") if cuda else ("operators", "CPU")
    top = ", ".join(f"{r.name[:60]} {r.share:.1%}" for r in library[:3])
    line = next((entry for entry in solution.lines if entry.line), None)
    where = _line_span(text, line.line) if line is not None else span
    at = f" (line {line.line})" if line is not None else ""
    if uncovered > 0 and own >= MIX_SHARE * uncovered and 1 - share >= OWN_FLOOR:
        return [Finding("torch-fallback", f"PyTorch's {kind} take {share:.1%} of forward's {unit} time{at} ({top}), "
                        f"the solution's own {1 - share:.1%}: a mix, fine when its own part replaces some of the "
                        "reference's work (an epilogue fused after a library matmul)", where, "information")]
    bypassed = tuple(Related(k.name_span, f"kernel `{k.name}`: PyTorch's {kind} did the work in its place")
                     for k in (anatomy.kernels if anatomy is not None else ()))
    return [Finding("torch-fallback", f"PyTorch does the work{at}: its {kind} take {share:.1%} of forward's {unit} "
                    f"time ({top}), the solution's own {1 - share:.1%}, too little to be doing any of the "
                    "reference's work", where, "warning", bypassed)]


def from_streams(streams: int, span: Span) -> list[Finding]:
    """Kernels on more than one CUDA stream during forward: the timer's events are recorded on one, so work on
    another is not timed (the host clock catches it only when it outlasts the wait before the start event)."""
    if streams <= 1:
        return []
    return [Finding("side-stream", f"forward's kernels ran on {streams} CUDA streams: work on a stream other than "
                    "the current one escapes the timer's events", span, "warning")]


def _line_span(text: str, line: int) -> Span:
    """The span of line `line` (1-based) of `text`, without its indentation."""
    lines = text.splitlines(keepends=True)
    if not 1 <= line <= len(lines):
        return Span(0, 0)
    start = sum(len(item) for item in lines[:line - 1])
    body = lines[line - 1].rstrip("\r\n")
    indent = len(body) - len(body.lstrip())
    return Span(start + indent, start + len(body))


def reference_failure(error: str, traceback: str) -> str:
    """A failed reference worker's error in words that say which part of the reference failed: its import (a syntax
    error, a missing module, module-level code), or what ran after (get_inputs, Model, forward)."""
    if error.startswith(("SyntaxError", "IndentationError", "TabError")):
        return f"the reference has a syntax error: {error}"
    frames = [line.strip() for line in traceback.splitlines() if line.strip().startswith("File ")]
    inside = [frame for frame in frames if "reference.py" in frame]
    if inside and inside[-1].endswith("in <module>"):
        return f"importing the reference failed: {error}"
    return f"the reference failed: {error}"


def syntax_error(text: str) -> str:
    """Where a file's Python does not parse ("line 3: invalid syntax"), or "" when it does: compiled here, never
    run, so the report can name a syntax error before any worker imports the file."""
    try:
        compile(text, "reference.py", "exec", dont_inherit=True)
    except SyntaxError as error:
        return f"line {error.lineno}: {error.msg}"
    except ValueError as error:  # null bytes
        return str(error)
    return ""


BUILD_REFUSED = "build-refused"


def build_refused(why: str, anatomy: Anatomy | None, name: str = "") -> Finding:
    """A load_inline call the harness would not build (`harness.admission`): what the candidate asked for, on its
    call where the anatomy finds it. An error: a name that is a path, flags that reach a shell or load code."""
    calls = [e for e in anatomy.extensions if e.name == name] or list(anatomy.extensions) if anatomy else []
    span = calls[0].call if calls else Span(0, 0)
    return Finding(BUILD_REFUSED, f"the harness refused to build this: {why}", span, "error")


def memory_uncapped(note: str, span: Span) -> Finding:
    """Information: no memory cgroup holds the solution's worker here (`process.Worker.memory_note`)."""
    return Finding("memory-uncapped", f"the solution's memory is not capped as a whole: {note}", span, "information")


SOCKET_REFUSED = "socket-refused"


def socket_refused(refused: Sequence[str], span: Span) -> Finding:
    """Sockets the sandbox refused the solution (`harness.seccomp`): a unix socket reaches the host's services, a
    vsock one the host itself. As its worker saw them, so one made past Python's socket module is not in the list."""
    return Finding(SOCKET_REFUSED, f"the solution tried to open sockets its sandbox does not allow: "
                   f"{'; '.join(refused[:6])}", span, "error")


def scratch_full(size_mb: int, span: Span) -> Finding:
    return Finding("scratch-full", f"the candidate filled its scratch space ({size_mb} MiB, its /tmp and HOME): what "
                   "failed after that failed for want of room", span, "error")
