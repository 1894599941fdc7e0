"""Whole checks on CPU with real builds: every failure class a user can hit, reported without harming the caller.

The C++ fixtures share one extension, so this file builds three: the shared one, a broken one and a CUDA one.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from dice_lsp import harness
from dice_lsp.harness.cache import BuildLock
from dice_lsp.harness.report import Report

pytestmark = pytest.mark.slow


def check(files, forward: str, options, reference: str = "add_reference.py") -> Report:
    return harness.check(files.text(reference), files.solution(forward), options)


def test_correct_solution_is_verified_and_timed(files, options):
    report = check(files, "return self.ext.add_values(a, b)", options)
    assert report.status == "correct", report.summary()
    assert len(report.trials) == options.correctness_trials + 1 and all(t.passed for t in report.trials)
    assert report.trials[-1].changed_inputs
    assert set(report.timings) == {"solution", "eager"} and report.timings["solution"].trials >= 20
    assert report.speedup_eager is not None and report.speedup_eager > 0
    assert report.device == "cpu" and report.tf32 is False
    assert [s.name for s in report.stages] == ["parse", "build", "reference", "verify", "time", "inspect"]
    assert Report.from_json(report.to_json()) == report


def test_sides_are_timed_in_rounds_and_pooled(files, options):
    """Each side gets ceil(trials / rounds) trials a round, so 7 trials over 3 rounds pool to 9 samples a side."""
    report = check(files, "return self.ext.add_values(a, b)",
                   options.with_(timing_trials=7, timing_rounds=3, timing_budget_s=0.0))
    assert report.status == "correct", report.summary()
    assert {name: t.trials for name, t in report.timings.items()} == {"solution": 9, "eager": 9}


def test_recheck_of_an_unchanged_file_does_not_rebuild(files, options):
    check(files, "return self.ext.add_values(a, b)", options)
    report = check(files, "return self.ext.add_values(a, b)", options)
    assert report.build_cached and report.durations["build"] < 10


def test_wrong_result_is_a_mismatch_with_its_worst_element(files, options):
    report = check(files, "return self.ext.subtract(a, b)", options)
    assert report.status == "mismatch"
    assert not report.trials[0].passed and report.trials[0].where.startswith("output[")
    assert report.trials[0].max_abs_error > 1


def test_output_cached_by_input_pointer(files, options):
    report = check(files, "return self.ext.add_cached(a, b)", options)
    assert report.status == "mismatch"
    assert [f.code for f in report.findings] == ["output-cached"]
    assert all(t.passed for t in report.trials if not t.changed_inputs)


def test_tiny_output_passes_allclose_but_is_flagged(files, options):
    report = check(files, "return self.ext.zeros(a, b)", options, reference="softmax_reference.py")
    assert all(t.passed for t in report.trials)  # allclose alone would accept zeros
    assert report.status == "mismatch"
    assert "tiny-output" in [f.code for f in report.findings]


def test_segfault_ends_only_the_worker(files, options):
    report = check(files, "return self.ext.segfault(a, b)", options)
    assert report.status == "crashed"
    assert "SIGSEGV" in report.message
    assert [f.code for f in report.findings] == ["crash"]


def test_hang_times_out(files, options):
    """Ended by the check's own run timeout (the one it was given, named in the message), not by the default one
    or never: a forward that spins forever could otherwise only end at pytest's timeout."""
    report = check(files, "return self.ext.spin(a, b)", options.with_(run_timeout=4.0))
    assert report.status == "timed-out" and report.message == "verify ran past its 4 s limit"
    assert report.stages[-1].name == "verify" and report.stages[-1].status == "timed-out"


def test_work_left_on_another_thread(files, options):
    forward = ("import threading; threading.Thread(target=__import__('time').sleep, args=(3,)).start(); "
               "return self.ext.add_values(a, b)")
    report = check(files, forward, options)
    assert "thread" in [f.code for f in report.findings]


def test_precision_changes_are_reported(files, options):
    forward = "torch.backends.cuda.matmul.allow_tf32 = True; return self.ext.add_values(a, b).half()"
    report = check(files, forward, options)
    messages = [f.message for f in report.findings if f.code == "precision"]
    assert any("tf32" in m for m in messages) and any("float16" in m for m in messages)


def test_cancel_during_build_leaves_no_stale_lock_and_compile_error_lands_on_its_line(files, options):
    broken = files.text("compile_error_solution.py")
    run = harness.Run(files.text("add_reference.py"), broken, options).start()
    extensions = Path(options.cache_dir)
    while not list(extensions.glob("harness_broken-*/dice.lock")):  # the build holds its lock now
        time.sleep(0.1)
    time.sleep(1.0)  # most likely the compiler runs by now; if not, the cancel still lands inside the build
    run.cancel()
    assert run.result().status == "cancelled"
    [entry] = [lock.parent for lock in extensions.glob("harness_broken-*/dice.lock")]
    BuildLock(entry).acquire(timeout=0)  # the killed builder held it: free now (raises TimeoutError if not)
    assert not list(entry.glob("**/lock"))  # nor did torch's lock survive

    report = harness.check(files.text("add_reference.py"), broken, options.with_(build_timeout=300))
    assert report.status == "compile-error"
    [error] = report.errors
    line = broken.splitlines()[error.line]
    assert line.strip() == "return undeclared_name;"
    assert error.span.slice(broken) == "undeclared_name"
    assert "undeclared_name" in error.message


def test_cuda_solution_without_gpu_is_built_not_run(files, options, cache_root):
    """Built by the light path, with the precompiled header `harness.prepare` made beforehand (the same one)."""
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("has a GPU")
    if not os.path.exists("/usr/local/cuda/bin/nvcc") and not os.environ.get("CUDA_HOME"):
        pytest.skip("no nvcc")
    cuda = options.with_(device="auto", build_timeout=900)
    header = harness.prepare(cuda)
    assert Path(header + ".gch").is_file()
    report = harness.check(files.text("add_reference.py"), files.text("cuda_solution.py"), cuda)
    assert report.status == "built-not-run", report.summary() + report.log
    assert report.errors == () and report.build_mode == "light"
    assert [p.name for p in (cache_root / "extensions" / "pch").iterdir() if p.is_dir()] == [Path(header).parent.name]


def test_batch_equals_single(files, options):
    pairs = [(files.text("add_reference.py"), files.solution(f"return self.ext.{name}(a, b)"))
             for name in ("add_values", "subtract")]
    reports = harness.check_many(pairs, options, workers=2)
    assert [r.status for r in reports] == ["correct", "mismatch"]
    assert [t.passed for t in reports[1].trials] == [t.passed for t in check(
        files, "return self.ext.subtract(a, b)", options).trials]


def test_batch_yields_each_report_as_its_check_ends_and_closing_cancels_the_rest(files, options):
    reference = files.text("add_reference.py")
    # The hang outlasts pytest's timeout (900 s) and so does its run timeout: a close() that waited for it, or a
    # first report held back until every check ended, fails the test rather than passing slowly
    pairs = [(reference, files.solution("return self.ext.add_values(a, b)")),
             (reference, files.solution("__import__('time').sleep(3600)")),
             (reference, files.solution("return self.ext.subtract(a, b)"))]
    threads = _threads()
    each = harness.check_each(pairs, options.with_(run_timeout=3600.0), workers=2)
    index, report = next(each)  # one check slot on CPU: pairs run in order, the first ends long before the hang
    assert (index, report.status) == (0, "correct")
    each.close()  # the hanging check is running: its workers are killed, the last pair never starts
    for thread in _threads() - threads:  # every thread the batch started ends (waited for, not timed)
        thread.join()
    assert not _threads() - threads


def _threads() -> set:
    """The live threads but those that wait for killed workers to end (they come and go with any check)."""
    return {t for t in threading.enumerate() if t.name != "dice-worker-reaper"}


def test_batch_checks_repeated_solutions_once_each_and_leaves_no_spares(files, options):
    pool = harness.WorkerPool()  # a caller that keeps no spares of its own
    pair = (files.text("add_reference.py"), files.solution("return self.ext.add_values(a, b)"))
    reports = harness.check_many([pair, pair, pair], options, workers=2, pool=pool)
    assert [r.status for r in reports] == ["correct"] * 3 and all(r.build_cached for r in reports)
    assert pool.spare_count == 0 and not pool.spares()  # batch's warm spares are gone
    assert not pool.kept  # and so are the reference workers it kept between checks of the same reference


def test_cli_check_json(files, options, cache_root, tmp_path, monkeypatch, capsys):
    from dice_lsp.cli import main

    reference = tmp_path / "problem.py"
    reference.write_text(files.text("add_reference.py"))
    (tmp_path / "problem_dice.py").write_text(files.solution("return self.ext.add_values(a, b)"))
    monkeypatch.setenv("DICE_LSP_CACHE", str(cache_root))
    check(files, "return self.ext.add_values(a, b)", options)  # built (or found) in the session's cache
    code = main(["check", str(reference), "--json", "--baseline", "eager", "--timing-trials", "10",
                 "--device", "cpu"])
    report = Report.from_json(json.loads(capsys.readouterr().out))
    assert code == 0 and report.status == "correct" and report.build_cached
