"""`--json` on the commands that lacked it (the README says every command has it): one JSON document on stdout."""

from __future__ import annotations

import json

from dice_lsp.cli import main


def test_data_tasks_json_says_what_was_written(tmp_path, capsys):
    target = tmp_path / "tasks.jsonl"
    assert main(["data", "tasks", str(target), "--count", "12", "--seed", "3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    written = [json.loads(line) for line in target.read_text().splitlines()]
    assert result["wrote"] == len(written) == 12 and result["split"] == "train" and result["target"] == str(target)
    counted: dict[str, int] = {}
    for task in written:
        counted[task["family"]] = counted.get(task["family"], 0) + 1
    assert result["families"] == counted
