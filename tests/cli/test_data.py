"""`dice-lsp data`: what it writes never lands on what is already there unless asked (`--force`). A dataset file may
be a curation that took hours of checks, and new KernelBench-layout tasks written into an old folder would be scored
together with the old ones by `eval` (tasks are numbered from 1, so a smaller set leaves the old tail in place)."""

from __future__ import annotations

import json

from dice_lsp.cli import main


def _problems(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.py"))


def test_tasks_refuse_an_existing_file_and_replace_it_when_forced(tmp_path, capsys):
    target = tmp_path / "train.jsonl"
    target.write_text('{"reference": "kept", "solution": "kept"}\n')
    assert main(["data", "tasks", str(target), "--count", "3"]) == 2
    assert "--force" in capsys.readouterr().err
    assert target.read_text() == '{"reference": "kept", "solution": "kept"}\n'  # untouched
    assert main(["data", "tasks", str(target), "--count", "3", "--force"]) == 0
    assert [json.loads(line)["split"] for line in target.read_text().splitlines()] == ["train"] * 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.jsonl"]  # no partial file left beside it
    plain = tmp_path / "plain"
    plain.write_text("")  # written whole, it still gets the mode a plain write gives (not mkstemp's 0600)
    assert target.stat().st_mode == plain.stat().st_mode


def test_tasks_say_why_they_refused(tmp_path, capsys):
    target = tmp_path / "train.jsonl"
    target.write_text("")
    assert main(["data", "tasks", str(target), "--count", "3"]) == 2
    assert capsys.readouterr().err.strip() == f"dice-lsp data: {target} exists; name a new file, or pass --force to " \
                                              "replace it"
    assert main(["data", "tasks", str(tmp_path), "--count", "3"]) == 2  # a folder, without --kernelbench
    assert "is a folder" in capsys.readouterr().err
    assert main(["data", "tasks", str(target), "--count", "3", "--kernelbench"]) == 2
    assert "is a file; --kernelbench writes a folder" in capsys.readouterr().err


def test_kernelbench_tasks_are_not_mixed_into_an_earlier_set(tmp_path, capsys):
    root = tmp_path / "heldout"
    assert main(["data", "tasks", str(root), "--kernelbench", "--count", "5", "--seed", "1"]) == 0
    before = _problems(root)
    assert len(before) == 10  # five problems and their solutions
    (root / "notes.txt").write_text("mine")

    assert main(["data", "tasks", str(root), "--kernelbench", "--count", "2", "--seed", "2"]) == 2
    assert "already holds 10 problem and solution files" in capsys.readouterr().err
    assert _problems(root) == before

    assert main(["data", "tasks", str(root), "--kernelbench", "--count", "2", "--seed", "2", "--force"]) == 0
    after = _problems(root)
    assert len(after) == 4 and all(name.split("/")[-1].split("_")[0] in ("1", "2") for name in after), after
    assert (root / "notes.txt").read_text() == "mine"  # only the level folders' .py files go


def test_an_empty_folder_takes_kernelbench_tasks_without_force(tmp_path):
    assert main(["data", "tasks", str(tmp_path), "--kernelbench", "--count", "2"]) == 0
    assert len(_problems(tmp_path)) == 4


def test_curate_refuses_an_existing_out_before_checking_anything(tmp_path, capsys):
    """Refused at once: the checks before the write may take hours, and their result would have nowhere to go."""
    source = tmp_path / "pairs.jsonl"  # never read: the refusal comes first
    target = tmp_path / "curated.jsonl"
    target.write_text("earlier curation\n")
    assert main(["data", "curate", str(source), str(target), "--min-speedup", "0"]) == 2
    assert capsys.readouterr().err.strip() == f"dice-lsp data: {target} exists; name a new file, or pass --force " \
                                              "to replace it"
    assert target.read_text() == "earlier curation\n"
