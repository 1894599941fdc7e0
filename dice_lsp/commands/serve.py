"""`dice-lsp serve`: start the language server, over stdio (what editors launch; also `python -m dice_lsp`) or TCP.

Logs go to stderr, which editors show in their output panel, or to --log-file; stdout carries the protocol.
Ctrl-C or SIGTERM ends it promptly, with every check cancelled and every worker it started ended.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from dice_lsp.commands.errors import CommandError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="run the language server (stdio unless --tcp or --port)",
                                   description="Run the language server for one editor: over stdio by default, as "
                                               "editors start it, or listening on TCP for one client.")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--stdio", action="store_true", help="talk LSP over stdin and stdout (the default)")
    where.add_argument("--tcp", metavar="HOST:PORT", type=host_port,
                       help="listen on HOST:PORT and serve the first client that connects (port 0: any free port)")
    where.add_argument("--port", type=int, metavar="PORT", help="the same as --tcp 127.0.0.1:PORT")
    parser.add_argument("--log-file", metavar="PATH", help="write the log here instead of stderr")
    parser.add_argument("--log-level", default="INFO", type=str.upper, choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="the least severe log records written (default INFO; DEBUG adds every LSP message)")
    parser.set_defaults(run=run)


def _stop_starting(number: int, frame) -> None:
    raise SystemExit(128 + number)


def host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, such as 127.0.0.1:2087, not {text!r}")
    return host.strip("[]"), int(port)


def run(args: argparse.Namespace) -> int:
    for number in (signal.SIGINT, signal.SIGTERM):  # until the server takes them over: end quietly, nothing started
        signal.signal(number, _stop_starting)
    where = args.tcp or (("127.0.0.1", args.port) if args.port is not None else None)
    try:
        handler = logging.FileHandler(args.log_file) if args.log_file else logging.StreamHandler(sys.stderr)
    except OSError as error:
        raise CommandError(f"cannot write the log to {args.log_file}: {error.strerror or error}") from None
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        handlers=[handler])
    if args.log_level != "DEBUG":  # pygls logs every message at INFO: only wanted when debugging the protocol
        logging.getLogger("pygls").setLevel(logging.WARNING)
    # Imported here, not at the top: the server brings pygls and lsprotocol (0.4-0.7 s to import, over twice the
    # rest of the command line), which every other command would pay for, since the CLI registers them all.
    from dice_lsp.lsp import transport
    from dice_lsp.server import server

    if where is not None:
        def listening(host: str, port: int) -> None:
            print(f"dice-lsp: language server listening on {host}:{port} for one client; Ctrl-C stops it",
                  file=sys.stderr, flush=True)
        try:
            connect = transport.tcp(*where, listening)
        except OSError as error:  # the port is taken, the host is not this machine's, ...
            raise CommandError(f"cannot listen on {where[0]}:{where[1]}: {error.strerror or error}") from None
        return transport.serve(server, connect, server.session.shutdown)

    def ready() -> None:
        if sys.stdin.isatty():  # a person started it in a terminal, not an editor: say what it is waiting for
            print("dice-lsp: language server on stdio, waiting for an editor to speak LSP; Ctrl-C stops it",
                  file=sys.stderr, flush=True)
    return transport.serve(server, transport.stdio(), server.session.shutdown, ready)
