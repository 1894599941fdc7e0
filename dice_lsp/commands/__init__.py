"""Subcommands of `dice-lsp`, one module each (`register(subparsers)`, then `run(args) -> int`), listed in cli.py.

Beside them: `errors` (CommandError) and `decoding` (the decoding flags). Commands import torch only inside `run`.
"""

from dice_lsp.commands.errors import CommandError

__all__ = ["CommandError"]
