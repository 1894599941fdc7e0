"""The JSONL record log: round trips, a line cut short by a kill, one writer at a time, settings kept per folder."""

from __future__ import annotations

import pytest

from dice_lsp.anatomy.types import Finding, Span
from dice_lsp.evaluation import EvaluationError, RecordLog, SampleRecord, read_records
from dice_lsp.evaluation.run import check_settings, result_settings
from dice_lsp.harness import Options
from dice_lsp.harness.report import Report, Stage, Trial


def make(sample: int, status: str = "correct") -> SampleRecord:
    report = Report(status, stages=(Stage("build", "ok", 1.5),), trials=(Trial(42, True, 1e-6),),
                    static_findings=(Finding("binding-not-called", "never called", Span(3, 9)),), speedup_eager=1.7)
    return SampleRecord(1, "1_add", sample, "class ModelNew: pass\n", report, "sols/level1/1_add.py", "", 0.25)


def test_a_record_round_trips_with_its_full_report(tmp_path):
    with RecordLog(tmp_path) as log:
        log.append(make(0))
    assert read_records(tmp_path) == {(1, "1_add", 0): make(0)}


def test_a_line_cut_short_is_ignored_and_the_next_append_starts_a_new_line(tmp_path):
    with RecordLog(tmp_path) as log:
        log.append(make(0))
    with open(tmp_path / RecordLog.NAME, "a") as file:
        file.write(make(1).to_json()[:40])  # killed while writing
    assert list(read_records(tmp_path)) == [(1, "1_add", 0)]
    with RecordLog(tmp_path) as log:
        log.append(make(2, "mismatch"))
    assert {k[2]: r.report.status for k, r in read_records(tmp_path).items()} == {0: "correct", 2: "mismatch"}


def test_one_writer_per_folder(tmp_path):
    with RecordLog(tmp_path):
        with pytest.raises(EvaluationError, match="another dice-lsp eval is writing"):
            RecordLog(tmp_path).__enter__()
    with RecordLog(tmp_path):  # released on exit (and by the kernel when a writer is killed)
        pass


def test_resuming_with_other_settings_is_refused(tmp_path):
    check_settings(tmp_path, result_settings("model-a", Options()))
    check_settings(tmp_path, result_settings("model-a", Options(run_timeout=5)))  # limits may change
    with pytest.raises(EvaluationError, match=r"options.atol: 0.01, now 0.0001\); give another --out"):
        check_settings(tmp_path, result_settings("model-a", Options(atol=1e-4)))
    with pytest.raises(EvaluationError, match="source"):
        check_settings(tmp_path, result_settings("model-b", Options()))
