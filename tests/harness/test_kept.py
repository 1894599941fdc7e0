"""Kept reference workers: a re-check of an unchanged reference reuses its worker, inputs and expected outputs, and
a check that cannot trust them (changed inputs file, another reference or options, cancelled) starts afresh."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from dice_lsp import harness
from dice_lsp.harness import messages, process

pytestmark = pytest.mark.slow


@pytest.fixture
def pool():
    """A pool of the test's own, keeping as the server does (spares kept, so references are too); every worker
    closed after."""
    own = harness.WorkerPool()
    own.keep_warm(1)
    yield own
    kept = list(own.kept.values())
    own.close()
    assert all(entry.worker.process.poll() is not None and not Path(entry.exchange).exists() for entry in kept)


def reference_stage(report) -> str:
    return next(s.detail for s in report.stages if s.name == "reference")


def test_unchanged_reference_is_reused_and_still_catches_a_wrong_solution(files, options, pool):
    reference = files.text("add_reference.py")
    first = harness.check(reference, files.solution("return self.ext.add_values(a, b)"), options, pool=pool)
    [entry] = pool.kept.values()
    wrong = harness.check(reference, files.solution("return self.ext.subtract(a, b)"), options, pool=pool)
    again = harness.check(reference, files.solution("return self.ext.add_values(a, b)"), options, pool=pool)
    assert [first.status, wrong.status, again.status] == ["correct", "mismatch", "correct"]
    assert reference_stage(first) == "" and "kept" in reference_stage(wrong) and "kept" in reference_stage(again)
    assert list(pool.kept.values()) == [entry] and entry.worker.process.poll() is None
    assert [(t.seed, t.passed, t.max_abs_error) for t in again.trials] == \
        [(t.seed, t.passed, t.max_abs_error) for t in first.trials]
    assert not (Path(entry.exchange) / "outputs.pt").exists()  # no stale outputs for the next check to compare


def test_reference_still_running_when_the_solution_failed_is_kept_and_answers_the_next_check(files, options, pool):
    reference = files.text("add_reference.py")
    broken = harness.check(reference, files.solution("return a + b", prelude="raise RuntimeError('no')\n"), options,
                           pool=pool)
    assert broken.status == "crashed" and "importing the solution failed" in broken.message
    [entry] = pool.kept.values()
    assert entry.reply is None and entry.worker.owed == 1  # its reference stage was never waited for
    report = harness.check(reference, files.solution("return self.ext.add_values(a, b)"), options, pool=pool)
    assert report.status == "correct" and reference_stage(report) == ""  # the owed answer, not a second run
    assert list(pool.kept.values()) == [entry] and entry.reply is not None and entry.worker.owed == 0


def test_other_options_and_failed_reference_are_not_reused(files, options, pool):
    reference = files.text("add_reference.py")
    solution = files.solution("return self.ext.add_values(a, b)")
    harness.check(reference, solution, options, pool=pool)
    other = harness.check(reference, solution, options.with_(seed=7), pool=pool)  # a second key; both are kept
    assert other.status == "correct" and reference_stage(other) == "" and len(pool.kept) == 2

    failing = reference.replace("return a + b", "raise ValueError('reference broke')")
    assert failing != reference
    report = harness.check(failing, solution, options, pool=pool)
    assert report.status == "invalid" and "reference broke" in report.message
    assert len(pool.kept) == 2  # the failed reference's worker was closed, not kept


def test_check_cancelled_during_the_build_keeps_its_reference_for_the_next_save(files, options, pool):
    reference = files.text("add_reference.py")
    building = threading.Event()  # set as the build stage begins, or when the check ends (it should not yet)
    run = harness.Run(reference, files.solution("return a + b", prelude="__import__('time').sleep(3600)\n"), options,
                      pool=pool, on_done=lambda report: building.set(),
                      on_stage=lambda stage: stage == "build" and building.set()).start()
    building.wait()
    reference_worker, solution_worker = run._check.workers
    while reference_worker.owed == 0 and not run.done():  # sent just after the solution's Build
        time.sleep(0.01)
    assert not run.done() and solution_worker.owed == 1  # the solution's import sleeps: its build never ends
    run.cancel()
    assert run.result().status == "cancelled"
    assert solution_worker.process.poll() is not None  # killed at once
    [entry] = pool.kept.values()
    assert entry.worker is reference_worker and entry.worker.process.poll() is None
    report = harness.check(reference, files.solution("return self.ext.add_values(a, b)"), options, pool=pool)
    assert report.status == "correct" and list(pool.kept.values()) == [entry]


def test_a_reference_busy_with_another_command_is_not_kept(files, options, pool):
    """Owing the answer to anything but the reference stage (cancelled while it compared or timed), a worker would
    hand that answer to the next check: it is closed instead."""
    reference = files.text("add_reference.py")
    harness.check(reference, files.solution("return self.ext.add_values(a, b)"), options, pool=pool)
    entry = pool.take_reference(next(iter(pool.kept)))
    entry.worker.send(messages.Time(warmup=1, trials=3))
    pool.keep_reference(("another",), entry)
    assert not pool.kept and entry.worker.process.poll() is not None


def test_at_most_kept_references_are_kept(files, options, pool):
    pool.kept_references = 1
    reference = files.text("add_reference.py")
    solution = files.solution("return self.ext.add_values(a, b)")
    harness.check(reference, solution, options, pool=pool)
    [first] = pool.kept.values()
    harness.check(reference, solution, options.with_(seed=7), pool=pool)
    assert len(pool.kept) == 1 and first.worker.process.poll() is not None


def test_a_solution_worker_closed_without_waiting_still_ends_and_leaves_no_directory(options, unknown_command):
    """A finished check kills its solution worker and leaves the waiting to a background thread (a CUDA process takes
    a while to end); the process and its private directory still go."""
    worker = process.Worker(options, warm=False)
    assert isinstance(worker.call(unknown_command, 60), messages.Failed)  # running and answering
    worker.close(wait=False)
    while worker.process.poll() is None or Path(worker.directory).exists():  # ends, however loaded the machine
        time.sleep(0.05)
    assert worker.ending() == "killed by SIGKILL" and not Path(worker.directory).exists()


