"""The `dice-lsp` command line: one subcommand per job, each defined in `dice_lsp/commands/`.

A command module exposes `register(subparsers)`, which adds its parser and sets `run(args) -> int` as the handler.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# Order is the order of `dice-lsp --help`. A module that fails to import (a missing optional dependency) must not
# take the other commands down with it, so each is imported on its own.
COMMANDS = ("serve", "inspect", "check", "generate", "train", "data", "eval")


class CommandError(Exception):
    """A user-facing error of a command: printed as one line, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dice-lsp",
        description="Write, check and benchmark CUDA kernels for PyTorch modules with DICE.",
    )
    from dice_lsp import __version__

    parser.add_argument("--version", action="version", version=f"dice-lsp {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"dice_lsp.commands.{name}")
        except ModuleNotFoundError as error:
            if error.name == f"dice_lsp.commands.{name}":
                continue  # not built yet in this checkout
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    handler = getattr(args, "run", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return int(handler(args) or 0)
    except CommandError as error:
        print(f"dice-lsp {args.command}: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"dice-lsp {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader left (`dice-lsp ... | head`): stop quietly, as a shell tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush cannot fail again
        return 141
