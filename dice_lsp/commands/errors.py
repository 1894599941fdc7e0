"""The command line's one error type: what a command raises when the user can fix the problem.

`dice_lsp.cli` prints it as one line and exits with status 2; it sits below the commands so they need not import cli.
"""

from __future__ import annotations


class CommandError(Exception):
    """A user-facing error of a command: printed as one line, exit status 2."""
