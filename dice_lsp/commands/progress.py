"""Progress of a long command on stderr (stdout keeps only the result): where it is and for how long so far.

On a terminal one line is rewritten in place; elsewhere (asked for with --progress) plain lines, so logs stay readable.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from typing import TextIO

from dice_lsp.commands.terminal import shown


def add_progress_option(parser) -> None:
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="show progress on stderr (default: only when stderr is a terminal)")


class ProgressLine:
    """`stage(text)` says what the command does now; `note(text)` adds how far it is. Off a terminal, every stage
    is a line and notes are lines at most every `every` seconds."""

    def __init__(self, wanted: bool | None, stream: TextIO | None = None, every: float = 10.0) -> None:
        self.stream = stream or sys.stderr
        self.live = _is_terminal(self.stream)
        self.enabled = self.live if wanted is None else wanted
        self.every = every
        self.current = ""
        self.started = self.noted = time.monotonic()
        self.width = 0  # of the line on the terminal now, to blank what a shorter one leaves

    def stage(self, text: str) -> None:
        self.current = shown(text)
        self.started = self.noted = time.monotonic()
        self._write(self.current)

    def note(self, text: str) -> None:
        now = time.monotonic()
        if self.live or now - self.noted >= self.every:
            self.noted = now
            self._write(f"{self.current}: {shown(text)}")

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def close(self) -> None:
        """Blank the terminal's line, so the result printed next starts clean."""
        if self.enabled and self.live and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0

    def _write(self, line: str) -> None:
        if not self.enabled:
            return
        if self.live:
            line = line[:shutil.get_terminal_size().columns - 1]  # a wrapped line could not be rewritten in place
            padding = " " * max(0, self.width - len(line))
            self.stream.write(f"\r{line}{padding}")
            self.width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False
