"""`dice-lsp data curate` end to end through the CPU harness: the correct pair is kept, the wrong one dropped with
its reason. The C++ pair is the one the RL test builds too, so the session's build cache builds it once."""

from __future__ import annotations

import json

import pytest

from dice_lsp.cli import main


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

    assert main(["data", "curate", str(source), str(target), "--min-speedup", "0", "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"kept 1 of 2 pairs -> {target}"
    assert lines[1].split() == ["dropped", "1", "mismatch"]
