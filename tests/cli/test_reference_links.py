"""The one-file forms `dice-lsp check SOL` and `dice-lsp inspect SOL` follow a solution's `# dice: reference = ...`
link as the server does: a regular file of a bounded size only. A link to a FIFO with no writer, /dev/stdin, /dev/zero
or a 10 GB sparse file is refused at once with its reason, in a real subprocess (its address space capped, so a
reader that tried to take /dev/zero whole fails instead of filling the machine)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

FILES = Path(__file__).parent.parent / "anatomy" / "files"
HANG = 120  # seconds: only a bound on a hang, which is what the old reader did with a FIFO or /dev/stdin


def capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dice_lsp", *args], capture_output=True, text=True, timeout=HANG,
                          stdin=subprocess.PIPE, preexec_fn=capped)


def linked(tmp_path: Path, target: str) -> Path:
    solution = tmp_path / "solution.py"
    solution.write_text(f"# dice: reference = {target}\n" + (FILES / "honest_add.py").read_text())
    return solution


@pytest.fixture(params=["fifo", "/dev/stdin", "/dev/zero", "sparse"])
def target(request, tmp_path) -> tuple[str, str]:
    """(what the link names, what the refusal says)"""
    if request.param == "fifo":
        os.mkfifo(tmp_path / "problem.py")
        return str(tmp_path / "problem.py"), "not a regular file"
    if request.param == "sparse":
        with open(tmp_path / "problem.py", "wb") as sparse:
            sparse.truncate(10 << 30)
        return str(tmp_path / "problem.py"), "a reference is at most"
    return request.param, "not a regular file"


@pytest.mark.parametrize("command", ["inspect", "check"])
def test_a_link_to_something_that_blocks_or_never_ends_is_refused(tmp_path, target, command):
    path, reason = target
    result = run(command, str(linked(tmp_path, path)), *(["--device", "cpu"] if command == "check" else []))
    assert result.returncode == 2, (result.returncode, result.stdout[-500:], result.stderr[-2000:])
    assert reason in result.stderr and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().count("\n") == 0, result.stderr


def test_a_link_to_a_regular_problem_is_still_followed(tmp_path):
    problem = tmp_path / "problem.py"
    problem.write_text((FILES / "honest_add_with_model.py").read_text())
    result = run("inspect", "--json", str(linked(tmp_path, "problem.py")))
    assert '"reference_path": "' + str(problem) in result.stdout, result.stderr[-2000:]
