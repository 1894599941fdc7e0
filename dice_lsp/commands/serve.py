"""`dice-lsp serve`: start the language server over stdio (what editors launch; also `python -m dice_lsp`).

Logs go to stderr, which editors show in their output panel; stdout carries the protocol.
"""

from __future__ import annotations

import argparse
import logging


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="run the language server over stdio")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.log_level != "DEBUG":  # pygls logs every message at INFO: only wanted when debugging the protocol
        logging.getLogger("pygls").setLevel(logging.WARNING)
    # Imported here, not at the top: the server brings pygls and lsprotocol (0.4-0.7 s to import, over twice the
    # rest of the command line), which every other command would pay for, since the CLI registers them all.
    from dice_lsp.server import server

    server.start_io()
    return 0
