"""UTF-8 byte offsets (what tree-sitter reports) -> code-point offsets (what Python strings and `Span` use).

ASCII text, the common case, maps one to one and costs nothing.
"""

from __future__ import annotations

import bisect


class ByteOffsets:
    def __init__(self, text: str, data: bytes | None = None) -> None:
        data = text.encode("utf-8") if data is None else data
        self._identity = len(data) == len(text)
        if self._identity:
            return
        # Byte offsets where each non-ASCII character starts, and how many extra bytes precede each of them.
        self._starts: list[int] = []
        self._extra: list[int] = []
        extra = 0
        byte = 0
        for char in text:
            width = len(char.encode("utf-8")) if ord(char) > 0x7F else 1
            if width > 1:
                self._starts.append(byte)
                self._extra.append(extra)
                extra += width - 1
            byte += width
        self._total_extra = extra

    def char(self, byte: int) -> int:
        if self._identity:
            return byte
        i = bisect.bisect_right(self._starts, byte) - 1
        if i < 0:
            return byte
        start, extra = self._starts[i], self._extra[i]
        if byte == start:
            return byte - extra
        following = self._extra[i + 1] if i + 1 < len(self._extra) else self._total_extra
        width = following - extra + 1  # bytes of the character at `start`
        if byte < start + width:  # inside a multi-byte character: its start
            return start - extra
        return byte - following
