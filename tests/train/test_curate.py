"""`dice-lsp data curate` end to end through the CPU harness: the correct pair is kept, the wrong one dropped with
its reason. The C++ pair is the one the RL test builds too, so the session's build cache builds it once."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from dice_lsp.cli import main
from dice_lsp.train.curate import journal_path


@pytest.mark.slow
def test_curate_keeps_the_good_pair_and_says_why_the_other_went(cpp_pair, tmp_path, capsys):
    source, target = tmp_path / "pairs.jsonl", tmp_path / "curated" / "kept.jsonl"
    good = {"reference": cpp_pair.reference, "solution": cpp_pair.solution, "level": 1}
    wrong = {"reference": cpp_pair.wrong_reference, "solution": cpp_pair.solution, "level": 2}
    source.write_text(json.dumps(wrong) + "\n\n" + json.dumps(good) + "\n")  # a blank line is skipped

    assert main(["data", "curate", str(source), str(target), "--min-speedup", "0", "--device", "cpu",
                 "--workers", "1", "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts == {"kept": 1, "total": 2, "dropped": {"mismatch": 1}}
    kept = [json.loads(line) for line in target.read_text().splitlines()]
    assert kept == [{**good, "speedup": None}]  # the record as given, plus its (untimed) speedup

    assert not journal_path(target).exists()  # the finished checks are in OUT now

    # The same OUT again: refused before anything is checked, as it holds a curation; replaced with --force
    assert main(["data", "curate", str(source), str(target), "--min-speedup", "0", "--device", "cpu"]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["data", "curate", str(source), str(target), "--min-speedup", "0", "--device", "cpu", "--force"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"kept 1 of 2 pairs -> {target}"
    assert lines[1].split() == ["dropped", "1", "mismatch"]


@pytest.mark.slow
def test_a_stopped_curation_goes_on_where_it_stopped(cpp_pair, cli_env, shared_build_cache, tmp_path):
    """Killed after its first check ended, a curation run again checks only the rest: the journal beside OUT holds
    the finished check, and the second run says it resumes. Then OUT is whole and the journal is gone."""
    source, target = tmp_path / "pairs.jsonl", tmp_path / "kept.jsonl"
    good = {"reference": cpp_pair.reference, "solution": cpp_pair.solution}
    wrong = {"reference": cpp_pair.wrong_reference, "solution": cpp_pair.solution}
    source.write_text("".join(json.dumps(pair) + "\n" for pair in (good, wrong)))
    command = [sys.executable, "-m", "dice_lsp", "data", "curate", str(source), str(target), "--min-speedup", "0",
               "--device", "cpu", "--workers", "1", "--no-progress", "--json"]
    journal = journal_path(target)
    first = subprocess.Popen(command, env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    def journaled() -> int:
        return journal.read_text().count("\n") if journal.exists() else 0

    try:  # waits for the first finished check, not for a time
        while first.poll() is None and journaled() == 0:
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
    finally:
        first.communicate()
    if first.returncode == 0 or target.exists():  # the curation was done before the kill landed: nothing to resume
        pytest.skip("both checks ended before the kill landed")
    entries = [json.loads(line) for line in journal.read_text().splitlines()]  # each check journaled whole
    assert len(entries) in (1, 2), entries  # (the second may end between the look and the kill)

    second = subprocess.run(command, env=cli_env, capture_output=True, text=True)
    assert second.returncode == 0, second.stderr
    assert f"resuming: {len(entries)} of 2 pairs were checked by an earlier run ({journal})" in second.stderr
    assert json.loads(second.stdout) == {"kept": 1, "total": 2, "dropped": {"mismatch": 1}}
    assert [json.loads(line) for line in target.read_text().splitlines()] == [{**good, "speedup": None}]
    assert not journal.exists() and {e["report"]["status"] for e in entries} <= {"correct", "mismatch"}


def test_a_journaled_check_is_taken_as_it_was(tmp_path):
    """The journal's report stands for its pair under the same options: it says correct, and the pair is kept,
    unchecked (a check would fail it: its solution is not even Python). A line cut short by a kill is skipped, and
    other options make another key."""
    from dice_lsp.harness import Options, Report
    from dice_lsp.train.curate import _key, curate

    pair = {"reference": "class Model: pass", "solution": "not python ("}
    source = tmp_path / "pairs.jsonl"
    source.write_text(json.dumps(pair) + "\n")
    options = Options(device="cpu", baseline="none", sandbox="require")
    report = Report(status="correct", speedup_eager=None)
    journal = tmp_path / ".kept.jsonl.checked.jsonl"
    journal.write_text(json.dumps({"key": _key(options, pair["reference"], pair["solution"]),
                                   "report": json.loads(report.to_json())}) + "\n" + '{"key": "cut sh')
    told: list[str] = []
    result = curate(source, 0.0, options, journal=journal, tell=told.append)
    assert (result.kept, result.total) == (1, 1) and told == [f"resuming: 1 of 1 pairs were checked by an earlier "
                                                              f"run ({journal})"]

    # A pair checked now is journaled on a line of its own, after the one the kill cut short
    pair["solution"] = "still not python ("
    source.write_text(source.read_text() + json.dumps(pair) + "\n")
    result = curate(source, 0.0, options, journal=journal, tell=told.append)
    assert (result.kept, result.total) == (1, 2) and told[1].startswith("resuming: 1 of 2 ")
    lines = journal.read_text().splitlines()
    assert lines[1] == '{"key": "cut sh' and json.loads(lines[2])["report"]["status"] != "correct", lines
    other = Options(device="cpu", baseline="none", sandbox="require", timing_trials=7)
    assert _key(other, pair["reference"], pair["solution"]) != _key(options, pair["reference"], pair["solution"])
