"""`dice-lsp check`'s text names where each problem is as compilers and linters do, `file:line:col: severity ...` at
the start of a line, so an editor's or a CI job's problem matcher (GitHub's gcc matcher, VS Code's $gcc) puts the
check's findings and compile errors on the solution's lines, as it does `inspect`'s (issue 24)."""

from __future__ import annotations

import re
from pathlib import Path

from dice_lsp.anatomy.types import Finding, Span
from dice_lsp.commands import check
from dice_lsp.harness.report import Diagnostic, Report

# The pattern of GitHub's gcc problem matcher (file, line, column, severity, message), anchored at the line's start
MATCHER = re.compile(r"^(.*):(\d+):(\d+):\s+(?:fatal\s+)?(warning|error):?\s+(.*)$")
SOLUTION = '''import torch
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''


def test_findings_and_placed_compile_errors_are_file_line_col_lines():
    relu = SOLUTION.index("torch.relu")
    report = Report(
        status="compile-error", message="",
        diagnostics=(Diagnostic("error", "identifier \"y\" is undefined", 1, 4, Span(14, 20), "cuda.cu"),
                     Diagnostic("error", "in a generated file only", 7, 2, None, "main.cpp")),
        static_findings=(Finding("torch-fallback", "forward computes with torch.relu", Span(relu, relu + 10),
                                 "warning"),),
        findings=(Finding("crash", "the build failed", Span(0, 5), "error"),),
    )
    lines = check.render(report, Path("sol.py"), SOLUTION).splitlines()
    matched = [MATCHER.match(line).groups() for line in lines if MATCHER.match(line)]
    assert ("sol.py", "2", "5", "error", "identifier \"y\" is undefined") in matched
    assert ("sol.py", "4", "16", "warning", "[torch-fallback] forward computes with torch.relu") in matched
    assert ("sol.py", "1", "1", "error", "[crash] the build failed") in matched
    # a message placed only in the generated file is not put on a line of the solution
    assert not any(groups[4] == "in a generated file only" for groups in matched)
    assert "  main.cpp:8:3 (generated): error: in a generated file only" in lines
