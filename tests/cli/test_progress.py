"""Progress of long commands on stderr: one line rewritten in place on a terminal, plain lines elsewhere when asked
for with --progress, nothing otherwise; and `dice-lsp check --progress` as a user runs it."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dice_lsp.commands.progress import ProgressLine

HARNESS_FILES = Path(__file__).resolve().parents[1] / "harness" / "files"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_one_line_rewritten_and_blanked_at_the_end():
    stream = Terminal()
    progress = ProgressLine(None, stream)
    progress.stage("loading model")
    progress.note("block 3")
    progress.stage("decoding")
    progress.close()
    assert "\n" not in stream.getvalue()
    # A shorter line blanks what the longer one before it left; the end blanks the last line
    assert stream.getvalue().split("\r")[1:] == ["loading model", "loading model: block 3", "decoding" + " " * 14,
                                                 " " * 8, ""]


def test_off_a_terminal_only_on_request_and_as_plain_lines():
    quiet = io.StringIO()
    ProgressLine(None, quiet).stage("loading")
    assert quiet.getvalue() == ""
    log = io.StringIO()
    progress = ProgressLine(True, log, every=3600.0)
    progress.stage("checking sol.py")
    progress.note("1 s")  # within `every` of the stage's line: not repeated into the log
    progress.stage("timing")
    assert log.getvalue() == "checking sol.py\ntiming\n"
    assert ProgressLine(False, Terminal()).enabled is False


def test_progress_text_from_files_is_escaped():
    log = io.StringIO()
    ProgressLine(True, log).stage("checking sol\x1b[2K\r.py")
    assert log.getvalue() == "checking sol\\x1b[2K\\r.py\n"


@pytest.mark.slow
def test_check_says_what_it_does_on_stderr_and_keeps_stdout_for_the_report(tmp_path):
    (tmp_path / "ref.py").write_text((HARNESS_FILES / "add_reference.py").read_text())
    solution = (HARNESS_FILES / "add_solution.py").read_text().replace("FUNCTION", "add_values")
    (tmp_path / "sol.py").write_text(solution)
    done = subprocess.run([sys.executable, "-m", "dice_lsp", "check", "ref.py", "sol.py", "--device", "cpu",
                           "--baseline", "none", "--timing-trials", "0", "--progress"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.splitlines()[:2] == ["checking sol.py", "checking sol.py: building"]
    assert done.stdout.startswith("sol.py: correct")


def test_check_says_each_stage_of_the_harness_as_it_begins(tmp_path):
    """A plain-PyTorch ModelNew builds nothing, so this runs every stage in seconds. The lines are the harness's
    stage events in order (elapsed-time notes, every 10 s off a terminal, are left out), not a clock."""
    reference = (HARNESS_FILES / "add_reference.py").read_text()
    (tmp_path / "ref.py").write_text(reference)
    (tmp_path / "sol.py").write_text(reference.replace("class Model(", "class ModelNew("))
    done = subprocess.run([sys.executable, "-m", "dice_lsp", "check", "ref.py", "sol.py", "--device", "cpu",
                           "--baseline", "eager", "--timing-trials", "3", "--progress"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.stdout.startswith("sol.py: correct"), done.stdout + done.stderr
    stages = [line for line in done.stderr.splitlines()
              if line.startswith("checking sol.py") and not re.search(r": \d+ s$", line)]
    assert stages == ["checking sol.py"] + [f"checking sol.py: {what}" for what in (
        "building", "waiting for the reference's outputs", "running the solution", "comparing outputs", "timing",
        "inspecting what ran")]
