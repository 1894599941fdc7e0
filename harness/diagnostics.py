"""Compiler output (g++, nvcc) -> diagnostics placed in the Python file through anatomy's position mapping.

Pure functions: `parse` reads raw lines; `place` maps a generated file's line back into the source string it came from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dice_lsp.anatomy.positions import LineIndex
from dice_lsp.anatomy.types import Anatomy, Span

from dice_lsp.harness.build import Segment
from dice_lsp.harness.report import Diagnostic

Layout = dict[str, list[Segment]]  # a build's generated files, each as the source strings it holds (build.layout)

# g++:  /x/main.cpp:12:5: error: 'foo' was not declared in this scope
# nvcc: /x/cuda.cu(12): error: identifier "foo" is undefined   (the column comes from the caret line below)
_GCC = re.compile(r"^(?P<file>[^\s:][^:]*?):(?P<line>\d+):(?P<col>\d+):\s+(?P<sev>fatal error|error|warning):\s+(?P<msg>.*)$")
_NVCC = re.compile(r"^(?P<file>[^\s(][^(]*?)\((?P<line>\d+)\):\s+(?P<sev>error|warning)(?:\s+#[\w-]+)?:?\s*(?P<msg>.*)$")


@dataclass(frozen=True)
class Raw:
    """One diagnostic as the compiler printed it: 1-based line and column in a generated file."""

    file: str
    line: int
    column: int
    severity: str
    message: str


def parse(output: str) -> list[Raw]:
    lines = output.splitlines()
    found: list[Raw] = []
    for i, text in enumerate(lines):
        match = _GCC.match(text)
        column = None
        if not match:
            match = _NVCC.match(text)
            if match:
                column = _caret_column(lines, i)
        if not match:
            continue
        severity = "error" if "error" in match["sev"] else "warning"
        col = int(match["col"]) if column is None and "col" in match.groupdict() and match["col"] else (column or 1)
        raw = Raw(match["file"].strip(), int(match["line"]), col, severity, match["msg"].strip())
        if raw not in found:
            found.append(raw)
    return found


def _caret_column(lines: list[str], i: int) -> int:
    """nvcc prints the offending source line and a caret line under the message."""
    for j in (i + 2, i + 3):
        if j < len(lines) and lines[j].strip() == "^":
            return len(lines[j]) - len(lines[j].lstrip()) + 1
    return 1


def place(raws: list[Raw], layouts: list[Layout], anatomy: Anatomy | None, text: str) -> list[Diagnostic]:
    """Map each raw diagnostic into the Python file; ones outside any source string land on the load_inline call."""
    index = LineIndex(text)
    result: list[Diagnostic] = []
    for raw in raws:
        file = raw.file.rsplit("/", 1)[-1]
        span = _locate(raw, file, layouts, anatomy)
        message = raw.message
        if span is None:
            span = _fallback_span(anatomy)
            message = f"{file}:{raw.line}: {raw.message}"
        line, column = index.position(span.start, "utf-32")
        diagnostic = Diagnostic(raw.severity, message, line, column, span, file)
        if diagnostic not in result:
            result.append(diagnostic)
    return result


def _locate(raw: Raw, file: str, layouts: list[Layout], anatomy: Anatomy | None) -> Span | None:
    if anatomy is None:
        return None
    for layout in layouts:
        for segment in layout.get(file, ()):
            first, count, value = segment.first, segment.count, segment.value
            if not first <= raw.line < first + count:
                continue
            for source in anatomy.sources:
                if source.value == value:
                    offset = source.value_offset_at(raw.line - first + 1, raw.column)
                    start = source.text_offset(offset)
                    end = source.text_offset(_word_end(value, offset))
                    return Span(start, max(end, start + 1))
    return None


def _word_end(value: str, offset: int) -> int:
    end = offset
    while end < len(value) and (value[end].isalnum() or value[end] == "_"):
        end += 1
    return end


def _fallback_span(anatomy: Anatomy | None) -> Span:
    if anatomy is not None and anatomy.extensions:
        return anatomy.extensions[0].call
    return Span(0, 0)
