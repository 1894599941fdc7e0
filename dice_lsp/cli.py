"""The `dice-lsp` command line: one subcommand per job, each a module of `dice_lsp/commands/`.

A command module exposes `register(subparsers)`, which adds its parser and sets `run(args) -> int` as the handler.
"""

from __future__ import annotations

import argparse
import os
import sys
from types import ModuleType

from dice_lsp import __version__
from dice_lsp.commands import check, data, generate, inspect, serve, train
from dice_lsp.commands import eval as eval_command  # the module's name is the subcommand's; `eval` is a builtin
from dice_lsp.commands.errors import CommandError

# The command table, in the order of `dice-lsp --help`: subcommand name -> the module that registers it.
COMMANDS: dict[str, ModuleType] = {
    "serve": serve, "inspect": inspect, "check": check, "generate": generate, "train": train, "data": data,
    "eval": eval_command,
}

__all__ = ["COMMANDS", "CommandError", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dice-lsp",
        description="Write, check and benchmark CUDA kernels for PyTorch modules with DICE.",
    )
    parser.add_argument("--version", action="version", version=f"dice-lsp {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS.values():
        command.register(subparsers)
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
