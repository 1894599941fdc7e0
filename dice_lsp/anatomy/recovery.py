"""Reading a file mid-edit: blank out a broken top-level statement so that the code after it parses again.

Blanking replaces characters with spaces and keeps newlines, so every offset read from the blanked text is an
offset into the real one.
"""

from __future__ import annotations

import re

from tree_sitter import Node

# A line that starts a new top-level statement: where the parse can pick up again after a broken one.
_RESUME = re.compile(r"^(?:class\s|def\s|async\s+def\s|@|if\s+__name__|[A-Za-z_][\w.]*\s*(?::[^=\n]*)?=(?!=))",
                     re.MULTILINE)


def broken_statements(root: Node, offsets) -> list[tuple[int, int]]:
    """Character ranges of top-level ERROR nodes: statements tree-sitter could not close (an open call or string)."""
    return [(offsets.char(child.start_byte), offsets.char(child.end_byte)) for child in root.children
            if child.is_error]


def blank_broken(text: str, broken: list[tuple[int, int]]) -> str | None:
    """`text` with each broken statement blanked from its line's start to the next top-level statement after it;
    None when nothing can be recovered (no statement starts after the break)."""
    chars = list(text)
    changed = False
    for start, _ in sorted(broken):
        line_start = text.rfind("\n", 0, start) + 1
        resume = _RESUME.search(text, text.find("\n", start) + 1 if "\n" in text[start:] else len(text))
        if resume is None:
            continue
        for i in range(line_start, resume.start()):
            if chars[i] != "\n":
                chars[i] = " "
        changed = True
    return "".join(chars) if changed else None
