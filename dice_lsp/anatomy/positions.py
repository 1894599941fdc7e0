"""Offsets into a file's text <-> (line, column) in the units an editor speaks.

LSP counts columns in UTF-16 code units by default (or UTF-8 / UTF-32 when negotiated); compilers count bytes.
"""

from __future__ import annotations

import bisect
from typing import Literal

Encoding = Literal["utf-8", "utf-16", "utf-32"]


def _units(char: str, encoding: Encoding) -> int:
    code = ord(char)
    if encoding == "utf-32":
        return 1
    if encoding == "utf-16":
        return 2 if code > 0xFFFF else 1
    if code < 0x80:
        return 1
    if code < 0x800:
        return 2
    if code < 0x10000:
        return 3
    return 4


class LineIndex:
    """Converts between code-point offsets into `text` and 0-based (line, column) positions."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.line_starts = [0]
        for i, char in enumerate(text):
            if char == "\n":
                self.line_starts.append(i + 1)

    def line_of(self, offset: int) -> int:
        offset = max(0, min(offset, len(self.text)))
        return bisect.bisect_right(self.line_starts, offset) - 1

    def line_text(self, line: int) -> str:
        start = self.line_starts[line]
        end = self.line_starts[line + 1] - 1 if line + 1 < len(self.line_starts) else len(self.text)
        return self.text[start:end]

    def position(self, offset: int, encoding: Encoding = "utf-16") -> tuple[int, int]:
        """0-based (line, column) of `offset`, the column counted in `encoding`'s code units."""
        offset = max(0, min(offset, len(self.text)))
        line = self.line_of(offset)
        start = self.line_starts[line]
        if encoding == "utf-32":
            return line, offset - start
        return line, sum(_units(c, encoding) for c in self.text[start:offset])

    def offset(self, line: int, column: int, encoding: Encoding = "utf-16") -> int:
        """Offset of a 0-based (line, column) position; past the end of a line clamps to its end."""
        if line < 0:
            return 0
        if line >= len(self.line_starts):
            return len(self.text)
        start = self.line_starts[line]
        line_text = self.line_text(line)
        if encoding == "utf-32":
            return start + min(max(column, 0), len(line_text))
        used = 0
        for i, char in enumerate(line_text):
            if used >= column:
                return start + i
            used += _units(char, encoding)
        return start + len(line_text)
