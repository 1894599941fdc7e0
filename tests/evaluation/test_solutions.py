"""`dice-lsp eval --solutions` end to end on CPU: real builds and checks of C++-only kernels, records, table, chart.

Also resuming: a re-run with the same --out skips every finished sample, and a run killed with SIGKILL finishes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from dice_lsp.cli import main
from dice_lsp.evaluation import read_records
from dice_lsp.harness.batch import Pipeline


def statuses(out):
    return {f"level{k[0]}/{k[1]}#{k[2]}": r.report.status for k, r in sorted(read_records(out).items())}


def test_every_sample_gets_a_record_with_its_kernel_and_full_report(uninterrupted, solutions):
    lines = [json.loads(line) for line in (uninterrupted / "samples.jsonl").read_text().splitlines()]
    assert len(lines) == 9  # 3 problems x 3 samples (the most any problem has), missing files included
    first = next(r for r in lines if (r["problem"], r["sample"]) == ("1_add", 0))
    assert {"problem", "level", "sample", "kernel", "report"} <= set(first)
    assert first["kernel"] == (solutions / "level1/1_add_sample0.py").read_text()
    assert [s["name"] for s in first["report"]["stages"]][:3] == ["parse", "build", "reference"]
    assert statuses(uninterrupted) == {
        "level1/1_add#0": "correct", "level1/1_add#1": "correct", "level1/1_add#2": "correct",
        "level1/2_small_sum#0": "mismatch", "level1/2_small_sum#1": "invalid", "level1/2_small_sum#2": "invalid",
        "level2/1_add_relu#0": "mismatch", "level2/1_add_relu#1": "invalid", "level2/1_add_relu#2": "invalid",
    }
    records = read_records(uninterrupted)
    assert [f.code for f in records[(1, "1_add", 1)].report.static_findings] == ["binding-not-called"]
    assert [f.code for f in records[(1, "1_add", 2)].report.findings] == ["precision"]  # seen at run time
    assert "tiny-output" in [f.code for f in records[(1, "2_small_sum", 0)].report.findings]
    assert records[(1, "2_small_sum", 1)].report.message == "no solution file level1/2_small_sum_sample1.py"


def test_table_counts_deceptive_kernels_as_failures_only_in_the_robust_rows(uninterrupted):
    table = (uninterrupted / "table.md").read_text()
    assert "| 1 | 6 | plain | 50.0% | 0.0% | 0.0% | – |" in table  # nothing timed: --baseline none
    assert "| 1 | 6 | robust | 16.7% | 0.0% | 0.0% | – |" in table
    assert "| 2 | 3 | plain | 0.0% |" in table
    assert "| 1 | 2 | plain | 50.0% |" in table and "| 1 | 2 | robust | 50.0% |" in table  # per problem
    assert "| 1 | 3 | 1 | 2 | 3 |" in table  # outcomes: correct, mismatch, invalid, with findings (any status)
    assert (uninterrupted / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_rerun_skips_every_finished_sample(uninterrupted, eval_args, capsys, monkeypatch):
    before = (uninterrupted / "samples.jsonl").read_text()
    batches = []  # every batch eval hands the harness to build and check
    original = Pipeline.submit
    monkeypatch.setattr(Pipeline, "submit", lambda self, pairs: batches.append(pairs) or original(self, pairs))
    assert main(eval_args(uninterrupted, "--quiet")) == 0
    assert batches == []  # nothing built or run
    assert "9 finished earlier, skipped" in capsys.readouterr().out
    assert (uninterrupted / "samples.jsonl").read_text() == before


def test_json_holds_the_tables_rows_and_where_the_files_are(uninterrupted, eval_args, capsys):
    assert main(eval_args(uninterrupted, "--json")) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["records"] == 9 and result["skipped"] == 9 and result["samples_per_problem"] == 3
    plain = next(r for r in result["scores"] if (r["level"], r["unit"], r["check"]) == (1, "samples", "plain"))
    assert (plain["total"], plain["passed"], plain["exec"], plain["fast_1"]) == (6, 3, 0.5, 0.0)
    robust = next(r for r in result["scores"] if (r["level"], r["unit"], r["check"]) == (1, "samples", "robust"))
    assert robust["passed"] == 1 and robust["geomean_speedup"] is None  # nothing timed: --baseline none
    assert result["outcomes"]["1"] == {"correct": 3, "mismatch": 1, "invalid": 2, "deceptive": 3}
    assert result["table"] == str(uninterrupted / "table.md")


def test_each_report_reaches_eval_while_later_checks_still_run(build_cache, problem_set, solution_text):
    from dice_lsp.evaluation.problems import find_problems
    from dice_lsp.evaluation.run import check
    from dice_lsp.evaluation.sources import Kernel
    from dice_lsp.harness import Options

    problem = find_problems(problem_set)[0]  # level1/1_add
    # The hang and its run timeout outlast pytest's timeout (900 s): a first report held back until every check
    # ended would fail the test, not pass it slowly
    kernels = [Kernel(problem, 0, solution_text("return self.ext.add_values(a, b)"), "test"),
               Kernel(problem, 1, solution_text("__import__('time').sleep(3600)"), "test")]
    each = check(kernels, {problem.key: problem.read()}, Options(device="cpu", run_timeout=3600.0), workers=2)
    kernel, report = next(each)
    assert (kernel.sample, report.status) == (0, "correct")
    each.close()  # cancels the hanging check


def checked(log) -> int:
    """Records of samples the harness checked (a missing solution file is recorded at once, without a check)."""
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip().endswith("}")]
    return sum(1 for line in lines if line["report"]["status"] != "invalid")


def test_killed_run_resumes_to_the_uninterrupted_table(uninterrupted, eval_args, tmp_path):
    out = tmp_path / "killed"
    # one batch holds all nine samples: a kill in the middle of it keeps the records finished so far
    command = [sys.executable, "-m", "dice_lsp", *eval_args(out)]
    with open(tmp_path / "stderr.txt", "w") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
        log = out / "samples.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            if log.is_file() and checked(log):
                break
            time.sleep(0.05)
        assert process.poll() is None, "the run ended before it could be killed"
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    finished = set(read_records(out))
    assert 1 <= len(finished) < 9

    resumed = subprocess.run(command, capture_output=True, text=True, timeout=170)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{len(finished)} finished earlier, skipped" in resumed.stdout
    assert (out / "table.md").read_text() == (uninterrupted / "table.md").read_text()
    assert statuses(out) == statuses(uninterrupted)
    keys = [tuple(json.loads(line)[k] for k in ("level", "problem", "sample"))
            for line in (out / "samples.jsonl").read_text().splitlines() if line.strip().endswith("}")]
    assert len(keys) == len(set(keys)) == 9  # nothing finished was checked again
