"""What the command line shows people: text that a file or a candidate wrote, made safe to print on a terminal.

JSON output needs none of this (json.dumps escapes every control character and, ASCII-only, every other one).
"""

from __future__ import annotations

import re

# Printable ASCII passes untouched, and tabs; everything else is looked at one character at a time.
_SUSPECT = re.compile(r"[^\x20-\x7e\t]")


def shown(text: object, lines: bool = False) -> str:
    """`text` with every character a terminal would act on instead of print written as Python writes it in a
    string literal: ANSI escapes (`\\x1b`), carriage returns, backspaces, other C0 and C1 controls, bidi overrides
    (`\\u202e`), zero-width and other format characters, line separators and unpaired surrogates (an undecodable
    file name). A candidate's crash message, a compiler's output or a file name can then never move the cursor,
    repaint a line or recolour it, so a crashed check cannot print a forged green "correct, 42.0x" over its verdict.
    Newlines are escaped too, so one message stays one line, unless `lines` says the text is a multi-line block (a
    log), which the caller indents. The rule is Python's `str.isprintable`, the one `repr` follows."""

    def escape(match: re.Match) -> str:
        character = match.group()
        if character.isprintable() or (lines and character == "\n"):
            return character
        return repr(character)[1:-1]

    return _SUSPECT.sub(escape, str(text))
