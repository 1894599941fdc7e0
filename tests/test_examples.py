"""The examples/ folder as the README shows it: inspect finds nothing wrong in the problem or its C++-only solution,
and `check` finds the solution correct on the CPU (it needs only a C++ compiler)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from dice_lsp.cli import build_parser
from dice_lsp.evaluation.metrics import ABOUT_THE_CHECK

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def dice(*args: str) -> subprocess.CompletedProcess:
    """`dice-lsp ARGS` as a user runs it from the checkout (the session's build cache comes through DICE_LSP_CACHE)."""
    return subprocess.run([sys.executable, "-m", "dice_lsp", *args], capture_output=True, text=True, cwd=ROOT)


@pytest.mark.parametrize("name", ["row_soft_threshold.py", "row_soft_threshold_cpp.py"])
def test_inspect_finds_nothing_wrong_in_the_examples(name):
    done = dice("inspect", "--json", f"examples/{name}")
    assert done.returncode == 0, done.stdout + done.stderr
    anatomy = json.loads(done.stdout)
    assert not anatomy["findings"] and not anatomy["syntax_errors"] and not anatomy["notes"], anatomy
    if name.endswith("_cpp.py"):  # the solution, linked to its problem, with one C++-only extension
        assert anatomy["model_new"] and anatomy["reference_link"] == "row_soft_threshold.py"
        [extension] = anatomy["extensions"]
        assert extension["functions"] == ["row_soft_threshold"]
        assert [source["role"] for source in extension["sources"]] == ["cpp"]
    else:
        assert anatomy["model"] and anatomy["get_inputs"] and not anatomy["model_new"]


@pytest.mark.slow
def test_the_cpp_example_is_correct_on_the_cpu(shared_build_cache):
    done = dice("check", "--json", "--device", "cpu", "--baseline", "eager", "--timing-trials", "20",
                "examples/row_soft_threshold_cpp.py")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["status"] == "correct", report["message"]
    assert report["device"] == "cpu" and (report["speedup_eager"] or 0) > 0, report["findings"]  # what withheld it
    # Nothing about the kernel; a busy machine may add a warning about the check itself (timing-unstable)
    assert not [f for f in report["findings"] if f["code"] not in ABOUT_THE_CHECK], report["findings"]
    assert all(trial["max_abs_error"] == 0 for trial in report["trials"])  # the same arithmetic, to the bit


def _shown_commands(document: Path) -> list[list[str]]:
    """The `dice-lsp ...` command lines of `document`'s code blocks (indented four spaces), comments dropped."""
    commands = []
    for line in document.read_text().splitlines():
        if line.startswith("    ") and "dice-lsp " in line:
            words = shlex.split(line.split("dice-lsp ", 1)[1], comments=True)
            if words[0] != "serve":  # `serve` speaks LSP on stdin: nothing to read or write here
                commands.append(words)
    return commands


@pytest.mark.parametrize("document", ["README.md", "examples/README.md"])
def test_the_commands_the_readmes_show_parse_and_read_only_files_that_exist_or_were_written_before(document):
    """A newcomer copies these lines in order: each must be one the CLI takes, and every file one reads must be in
    the checkout or written by an earlier line (`--out`). The examples' `generate` once had no `--out`, so it printed
    the code and the next line's `check` found no file."""
    tracked = set(subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=ROOT).stdout.split())
    assert "examples/row_soft_threshold.py" in tracked, "not a git checkout"  # a generated file is not in the list
    written: set[str] = set()
    commands = _shown_commands(ROOT / document)
    assert commands, f"{document} shows no dice-lsp command"
    for words in commands:
        args = build_parser().parse_args(words)  # exits (SystemExit) on a command line the CLI does not take
        out = str(args.out) if getattr(args, "out", None) else None
        for word in words:
            if word.endswith(".py") and word != out:
                assert word in tracked or word in written, f"{document}: `dice-lsp {' '.join(words)}` reads " \
                    f"{word}, which is not in the checkout and no earlier line writes"
        if out:
            written.add(out)
