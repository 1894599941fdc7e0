"""The `dice-lsp` command line: one subcommand per job, each a module of `dice_lsp/commands/`.

A command module exposes `register(subparsers)`, which adds its parser and sets `run(args) -> int` as the handler.
Here every command gets the same ending: a CommandError or an unexpected exception is one line on stderr (the
traceback too with --debug), Ctrl-C and SIGTERM end every process the command started (`commands.stop`).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from types import ModuleType

from dice_lsp import __version__
from dice_lsp.commands import check, data, generate, inspect, serve, train
from dice_lsp.commands import eval as eval_command  # the module's name is the subcommand's; `eval` is a builtin
from dice_lsp.commands.errors import CommandError
from dice_lsp.commands.stop import Stopped, stoppable
from dice_lsp.commands.terminal import shown

# The command table, in the order of `dice-lsp --help`: subcommand name -> the module that registers it.
COMMANDS: dict[str, ModuleType] = {
    "serve": serve, "inspect": inspect, "check": check, "generate": generate, "train": train, "data": data,
    "eval": eval_command,
}

# Commands that handle their own signals and errors: the language server answers its client until it is told to exit.
OWN_ENDING = frozenset({"serve"})
DEBUG_HELP = "on an unexpected error, print the traceback too"

__all__ = ["COMMANDS", "CommandError", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dice-lsp",
        description="Write, check and benchmark CUDA kernels for PyTorch modules with DICE.",
        epilog="Exit status 0: done (and, for check and inspect, nothing wrong found); 1: check found the solution "
               "wrong, inspect found warnings or errors, or generate wrote no kernel; 2: bad arguments, an unreadable "
               "file or an unexpected error; 130 / 143: stopped by Ctrl-C / SIGTERM.")
    parser.add_argument("--version", action="version", version=f"dice-lsp {__version__}")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in COMMANDS.items():
        command.register(subparsers)
        if name not in OWN_ENDING:
            for leaf in leaves(subparsers.choices[name]):
                # SUPPRESS: a subcommand's default would overwrite a `dice-lsp --debug COMMAND` given before it
                leaf.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    return parser


def leaves(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parsers that take a command's options: `parser` itself, or those of its actions (`data curate`, ...)."""
    nested = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    if not nested:
        return [parser]
    return [leaf for action in nested for child in dict.fromkeys(action.choices.values()) for leaf in leaves(child)]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    handler = getattr(args, "run", None)
    if handler is None:
        parser.print_help()
        return 2
    name = args.command
    try:
        if name in OWN_ENDING:  # its signals are its own, its usage errors are said as every command's are
            return int(handler(args) or 0)
        with stoppable():
            return int(handler(args) or 0)
    except CommandError as error:
        print(shown(f"dice-lsp {name}: {error}"), file=sys.stderr)
        return 2
    except (Stopped, KeyboardInterrupt) as stop:
        why = stop.why if isinstance(stop, Stopped) else "interrupted"
        print(f"dice-lsp {name}: {why}; the processes it started are ended", file=sys.stderr)
        return stop.exit_code if isinstance(stop, Stopped) else 130
    except BrokenPipeError:  # the reader left (`dice-lsp ... | head`): stop quietly, as a shell tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush cannot fail again
        return 141
    except Exception as error:  # a bug, or a failure no command foresaw: one line, the traceback on request
        if args.debug:
            traceback.print_exc()
        hint = "" if args.debug else " (run again with --debug for the traceback)"
        print(shown(f"dice-lsp {name}: unexpected error: {type(error).__name__}: {error}{hint}"), file=sys.stderr)
        return 2
