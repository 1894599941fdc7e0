"""Metric arithmetic against tables worked out by hand, on constructed reports (nothing is built or run).

Level 1: two problems x two samples with a deceptive correct sample each; level 2: one problem, nothing timed.
"""

from __future__ import annotations

import math

from dice_lsp.anatomy.types import Finding, Span
from dice_lsp.evaluation import SampleRecord, deceptions, score_levels
from dice_lsp.evaluation.metrics import statuses
from dice_lsp.evaluation.table import render
from dice_lsp.harness.report import Report

FALLBACK = Finding("torch-fallback", "forward computes with PyTorch", Span(100, 120), "warning")
TINY = Finding("tiny-output", "passes only because outputs are tiny", Span(200, 240), "error")
INFO = Finding("torch-fallback", "forward also runs PyTorch's add", Span(300, 310), "information")


def sample(level, problem, index, status, speedup=None, static=(), runtime=()):
    report = Report(status, speedup_eager=speedup, speedup_compile=None if speedup is None else speedup / 2,
                    static_findings=tuple(static), findings=tuple(runtime))
    return SampleRecord(level, problem, index, "class ModelNew: ...", report)


RECORDS = [
    sample(1, "1_add", 0, "correct", 2.5),
    sample(1, "1_add", 1, "correct", 0.5, static=[FALLBACK]),
    sample(1, "2_relu", 0, "mismatch"),
    sample(1, "2_relu", 1, "correct", 1.5, static=[INFO], runtime=[TINY]),
    sample(2, "1_conv", 0, "compile-error"),
    sample(2, "1_conv", 1, "correct", None, static=[INFO]),
]

EXPECTED = """\
# dice-lsp eval: hand-made

Speedups against eager PyTorch. Exec: the fraction correct on every trial; fast_1, fast_2: the fraction correct with \
speedup > p, over all of them; the geometric mean is over the correct ones that were timed (n). **plain**: the \
harness's correctness; **robust**: also no static or run-time deception finding of severity warning or error.

## Per sample (2 samples per problem, each counts once)

| Level | Samples | Check | Exec | fast_1 | fast_2 | Geo-mean speedup (n) |
|---|---|---|---|---|---|---|
| 1 | 4 | plain | 75.0% | 50.0% | 25.0% | 1.23x (3) |
| 1 | 4 | robust | 25.0% | 25.0% | 25.0% | 2.50x (1) |
| 2 | 2 | plain | 50.0% | 0.0% | 0.0% | – |
| 2 | 2 | robust | 50.0% | 0.0% | 0.0% | – |

## Per problem (pass@any: a problem passes if any of its 2 samples does, at its best passing speedup)

| Level | Problems | Check | Exec | fast_1 | fast_2 | Geo-mean speedup (n) |
|---|---|---|---|---|---|---|
| 1 | 2 | plain | 100.0% | 100.0% | 50.0% | 1.94x (2) |
| 1 | 2 | robust | 50.0% | 50.0% | 50.0% | 2.50x (1) |
| 2 | 1 | plain | 100.0% | 0.0% | 0.0% | – |
| 2 | 1 | robust | 100.0% | 0.0% | 0.0% | – |

## Outcomes (samples per report status)

| Level | correct | mismatch | compile-error | with deception findings |
|---|---|---|---|---|
| 1 | 3 | 1 | 0 | 2 |
| 2 | 1 | 0 | 1 | 0 |
"""


def test_per_sample_rows_match_the_hand_computed_numbers():
    rows = {(s.level, s.unit, s.robust): s for s in score_levels(RECORDS)}
    plain, robust = rows[(1, "samples", False)], rows[(1, "samples", True)]
    assert (plain.total, plain.passed, plain.fast, plain.timed) == (4, 3, ((1.0, 2), (2.0, 1)), 3)
    assert math.isclose(plain.geomean, (2.5 * 0.5 * 1.5) ** (1 / 3))
    assert (robust.total, robust.passed, robust.fast, robust.geomean) == (4, 1, ((1.0, 1), (2.0, 1)), 2.5)
    untimed = rows[(2, "samples", False)]
    assert (untimed.exec_rate, untimed.fast_rate(1.0), untimed.geomean, untimed.timed) == (0.5, 0.0, None, 0)


def test_per_problem_rows_take_any_sample_at_its_best_speedup():
    rows = {(s.level, s.unit, s.robust): s for s in score_levels(RECORDS)}
    plain, robust = rows[(1, "problems", False)], rows[(1, "problems", True)]
    assert (plain.total, plain.passed, plain.fast) == (2, 2, ((1.0, 2), (2.0, 1)))
    assert math.isclose(plain.geomean, math.sqrt(2.5 * 1.5))
    assert (robust.passed, robust.fast, robust.geomean) == (1, ((1.0, 1), (2.0, 1)), 2.5)


def test_against_torch_compile_uses_the_other_speedup():
    rows = {(s.level, s.unit, s.robust): s for s in score_levels(RECORDS, baseline="compile")}
    plain = rows[(1, "samples", False)]
    assert plain.fast == ((1.0, 1), (2.0, 0))  # 1.25, 0.25, 0.75
    assert math.isclose(plain.geomean, (1.25 * 0.25 * 0.75) ** (1 / 3))


def test_rendered_table_equals_the_hand_written_one():
    scores = score_levels(RECORDS)
    assert render("dice-lsp eval: hand-made", scores, statuses(RECORDS), samples=2) == EXPECTED


def test_single_sample_table_has_no_per_problem_section():
    one = [r for r in RECORDS if r.sample == 0]
    text = render("one", score_levels(one), statuses(one), samples=1)
    assert "Per problem" not in text
    assert "| 1 | 2 | plain | 50.0% | 50.0% | 50.0% | 2.50x (1) |" in text


def test_a_finding_seen_statically_and_at_run_time_counts_once():
    same_place = Finding("torch-fallback", "seen at run time too", FALLBACK.span, "error")
    report = Report("correct", static_findings=(FALLBACK, INFO), findings=(same_place, TINY))
    assert [f.code for f in deceptions(report)] == ["torch-fallback", "tiny-output"]
    assert deceptions(Report("correct", static_findings=(INFO,))) == ()


def test_an_empty_level_scores_zero_without_dividing_by_zero():
    assert score_levels([]) == []


def test_warnings_about_the_check_itself_do_not_fail_the_robust_metric():
    """An honest kernel checked without the sandbox, or timed on a busy machine, is no deception."""
    about = (Finding("unsandboxed", "ran without a sandbox", Span(0, 5), "warning"),
             Finding("timing-unstable", "rounds disagree", Span(0, 5), "warning"))
    assert deceptions(Report("correct", findings=about)) == ()
    assert deceptions(Report("correct", findings=(*about, FALLBACK))) == (FALLBACK,)
