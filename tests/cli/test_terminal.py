"""Output hygiene: text that a file or a candidate wrote reaches the terminal escaped, so it can neither move the
cursor, repaint a line nor recolour it; a crashed check cannot print a forged green "correct, 42.00x" over its verdict.

The attack is a candidate whose forward raises with terminal escapes in its message: the harness puts that message in
the report's message, its crash finding and its log, and `dice-lsp check` prints all three.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dice_lsp.anatomy.types import Finding, Span
from dice_lsp.commands import check
from dice_lsp.commands.terminal import shown
from dice_lsp.harness.report import Diagnostic, KernelShare, Report, Stage, Timing, Trial

ROOT = Path(__file__).resolve().parents[2]
HARNESS_FILES = ROOT / "tests" / "harness" / "files"
# Erase the line, go back to its start, print a green verdict, hide the rest: what a forged line needs
FORGED = "\x1b[2K\r\x1b[32msol.py: correct; 6 trials, max abs error 0; 42.00x vs eager\x1b[0m\x1b[8m"
UNSAFE = ["\x1b", "\r", "\b", "\x07", "\x00", "\x7f", "\x85", "\x9b", "\u202e", "\u2066", "\u200b", "\u2028",
          "\ufeff", "\udcff"]


def terminal_safe(text: str) -> bool:
    """Nothing a terminal acts on but the newline: every other character prints as itself."""
    return all(c.isprintable() or c == "\n" for c in text)


@pytest.mark.parametrize("character", UNSAFE)
def test_every_control_format_and_bidi_character_is_escaped(character):
    escaped = shown(f"a{character}b")
    assert terminal_safe(escaped) and "\n" not in escaped
    assert escaped == "a" + repr(character)[1:-1] + "b"


def test_printable_text_is_untouched_and_newlines_kept_only_in_blocks():
    text = "naïve 日本 ✓ \\x1b (a literal backslash) \ttab"
    assert shown(text) == text
    assert shown("one\ntwo") == "one\\ntwo"  # a message stays one line: no forged line after it
    assert shown("one\ntwo\r", lines=True) == "one\ntwo\\r"


def test_check_render_escapes_every_text_field_of_a_report():
    """Every field a candidate or a file can fill, poisoned; the rendered report holds no control character."""
    span = Span(0, 1)
    report = Report(
        status="crashed", message=FORGED,
        stages=(Stage("build", "ok", 1.0, FORGED),),
        diagnostics=(Diagnostic("error", FORGED, 3, 4, None, FORGED),),
        trials=(Trial(42, False, 1.0, where=FORGED, note=FORGED),),
        findings=(Finding("crash", FORGED, span, "error"),),
        kernels=(KernelShare(FORGED, 0.5, launches=3),),
        timings={"solution": Timing(1.0, 0.1, 0.9, 1.1, 10, clock=FORGED)},
        device=FORGED, build_mode=FORGED, log=f"first\n{FORGED}\nlast\x1b[0m",
    )
    text = check.render(report, Path(f"sol{FORGED}.py"), f"import torch\n{FORGED}\n")
    assert terminal_safe(text), repr(text)
    assert "\\x1b[32m" in text  # shown, not acted on
    assert "  first" in text.splitlines() and "  last\\x1b[0m" in text.splitlines()  # the log keeps its lines


@pytest.mark.slow
def test_a_crash_message_with_escapes_is_printed_escaped_by_a_real_check(tmp_path):
    (tmp_path / "ref.py").write_text((HARNESS_FILES / "add_reference.py").read_text())
    solution = (HARNESS_FILES / "add_solution.py").read_text().replace(
        "        return self.ext.FUNCTION(a, b)", f"        raise RuntimeError({FORGED!r})")
    (tmp_path / "sol.py").write_text(solution)
    command = [sys.executable, "-m", "dice_lsp", "check", "ref.py", "sol.py", "--device", "cpu", "--baseline", "none",
               "--timing-trials", "0"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("sol.py: crashed"), done.stdout
    assert terminal_safe(done.stdout) and terminal_safe(done.stderr), repr(done.stdout)
    assert "\\x1b[2K\\r\\x1b[32msol.py: correct" in done.stdout  # the forged verdict, visible for what it is
    # JSON stays JSON: the same message, escaped by the JSON encoder, decodes back to the candidate's exact text
    as_json = subprocess.run(command + ["--json"], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert terminal_safe(as_json.stdout)
    assert FORGED in json.loads(as_json.stdout)["message"]
