"""Python string literals evaluated the way Python does, keeping where each character of the value came from.

This is what lets a compiler's "cuda.cu:12:7" land on the right character of the Python file, through raw strings,
escapes, implicit concatenation and `+`.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from dice_lsp.anatomy.types import Piece

_SIMPLE_ESCAPES = {
    "\\": "\\",
    "'": "'",
    '"': '"',
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
}
_OCTAL = "01234567"
_HEX = "0123456789abcdefABCDEF"


@dataclass(frozen=True)
class Literal:
    """The value of a string expression and the map from value offsets to file offsets."""

    value: str
    pieces: tuple[Piece, ...]

    def __add__(self, other: Literal) -> Literal:
        shift = len(self.value)
        moved = tuple(Piece(p.value_start + shift, p.text_start, p.length) for p in other.pieces)
        return Literal(self.value + other.value, self.pieces + moved)


class _Builder:
    def __init__(self) -> None:
        self.chars: list[str] = []
        self.pieces: list[Piece] = []
        self._run_start: int | None = None  # file offset where the current one-to-one run began
        self._run_value: int = 0

    def copy(self, char: str, text_offset: int) -> None:
        """A character copied verbatim from the file."""
        if self._run_start is None or self._run_start + (len(self.chars) - self._run_value) != text_offset:
            self._close()
            self._run_start = text_offset
            self._run_value = len(self.chars)
        self.chars.append(char)

    def escape(self, produced: str, text_offset: int) -> None:
        """Characters produced by an escape sequence starting (with its backslash) at `text_offset`."""
        self._close()
        self.pieces.append(Piece(len(self.chars), text_offset, 0))
        self.chars.extend(produced)

    def _close(self) -> None:
        if self._run_start is not None:
            length = len(self.chars) - self._run_value
            if length:
                self.pieces.append(Piece(self._run_value, self._run_start, length))
        self._run_start = None

    def build(self) -> Literal:
        self._close()
        return Literal("".join(self.chars), tuple(self.pieces))


def evaluate_literal(text: str, start: int, end: int) -> Literal | None:
    """Evaluate the single string literal `text[start:end]` (prefix and quotes included).

    Returns None for f-strings with interpolations and for text that is not a complete string literal.
    """
    i = start
    while i < end and text[i].isalpha():
        i += 1
    prefix = text[start:i].lower()
    if not set(prefix) <= set("rbuf") or i >= end:
        return None
    quote = text[i : i + 3] if text[i : i + 3] in ('"""', "'''") else text[i : i + 1]
    if quote not in ('"', "'", '"""', "'''") or not text.endswith(quote, i, end) or end - i < 2 * len(quote):
        return None
    body_start, body_end = i + len(quote), end - len(quote)
    raw = "r" in prefix
    fstring = "f" in prefix
    out = _Builder()
    j = body_start
    while j < body_end:
        char = text[j]
        if fstring and char in "{}":
            if text[j : j + 2] in ("{{", "}}"):
                out.escape(char, j)
                j += 2
                continue
            return None  # an interpolation: the value is not known statically
        if char == "\r":  # Python reads source with universal newlines: \r\n and \r become \n
            if text[j + 1 : j + 2] == "\n":
                j += 1
                continue
            out.escape("\n", j)
            j += 1
            continue
        if char != "\\":
            out.copy(char, j)
            j += 1
            continue
        if raw:
            # In a raw string a backslash stays, and it also protects the next character (a quote) from ending it.
            out.copy(char, j)
            if j + 1 < body_end:
                out.copy(text[j + 1], j + 1)
            j += 2
            continue
        j = _escape(text, j, body_end, out, bytes_literal="b" in prefix)
    return out.build()


def _escape(text: str, j: int, end: int, out: _Builder, bytes_literal: bool) -> int:
    """Decode the escape sequence at text[j] (a backslash); return the offset after it."""
    nxt = text[j + 1] if j + 1 < end else ""
    if nxt == "\n":
        out.escape("", j)  # line continuation: produces nothing
        return j + 2
    if nxt == "\r":
        skip = 3 if text[j + 2 : j + 3] == "\n" else 2
        out.escape("", j)
        return j + skip
    if nxt in _SIMPLE_ESCAPES:
        out.escape(_SIMPLE_ESCAPES[nxt], j)
        return j + 2
    if nxt and nxt in _OCTAL:
        k = j + 1
        while k < end and k < j + 4 and text[k] in _OCTAL:
            k += 1
        out.escape(chr(int(text[j + 1 : k], 8) & (0xFF if bytes_literal else 0x1FF)), j)
        return k
    widths = {"x": 2} if bytes_literal else {"x": 2, "u": 4, "U": 8}
    if nxt in widths:
        width = widths[nxt]
        digits = text[j + 2 : j + 2 + width]
        if len(digits) == width and all(c in _HEX for c in digits):
            out.escape(chr(int(digits, 16)), j)
            return j + 2 + width
    if nxt == "N" and not bytes_literal and text[j + 2 : j + 3] == "{":
        close = text.find("}", j + 3, end)
        if close != -1:
            try:
                out.escape(unicodedata.lookup(text[j + 3 : close]), j)
                return close + 1
            except KeyError:
                pass
    # An unknown escape keeps its backslash (Python warns, but the value has both characters).
    out.copy("\\", j)
    return j + 1
