"""`--json` on every command (the README says each prints JSON with it): one JSON document on stdout."""

from __future__ import annotations

import argparse
import json

from dice_lsp.cli import COMMANDS, OWN_ENDING, build_parser, leaves, main


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


def test_every_command_but_the_server_takes_json():
    """A script that passes --json to each command it runs is never told `unrecognized arguments: --json`."""
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    lacking = [leaf.prog for name in COMMANDS if name not in OWN_ENDING for leaf in leaves(subparsers.choices[name])
               if not any("--json" in action.option_strings for action in leaf._actions)]
    assert not lacking, f"commands without --json: {lacking}"
