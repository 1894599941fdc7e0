"""The transport: one client over stdio or TCP, served until it exits or SIGINT/SIGTERM arrives, and an end that
leaves nothing running (every check cancelled, every worker and the generation child ended, every command answered).
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import signal
import socket
import sys
import threading
from typing import Any, Awaitable, Callable

from pygls.io_ import StdoutWriter, run_async
from pygls.lsp.server import LanguageServer

from dice_lsp import __version__
from dice_lsp.lsp.protocol import DiceProtocol

log = logging.getLogger("dice_lsp")
SIGNALS = (signal.SIGINT, signal.SIGTERM)
Connect = Callable[[], Awaitable[tuple[Any, Any]]]  # (reader, writer) in pygls' reader and writer interfaces


def serve(ls: LanguageServer, connect: Connect, stop: Callable[[], None], ready: Callable[[], None] = lambda: None
          ) -> int:
    """Serve the client `connect` brings with `ls` (its protocol a DiceProtocol) until the client exits (status 0
    after a shutdown request, else 1) or SIGINT or SIGTERM arrives (128 + its number, as a shell reports it). Either
    way `stop()` ends what the server started (checks, workers, the generation child) and every running command
    answers before this returns. A second signal ends the process at once. `ready()` is called once signals are
    handled so."""
    return asyncio.run(_serve(ls, connect, stop, ready))


async def _serve(ls: LanguageServer, connect: Connect, stop: Callable[[], None], ready: Callable[[], None]) -> int:
    loop = asyncio.get_running_loop()
    stopped: asyncio.Future[int] = loop.create_future()
    for number in SIGNALS:
        loop.add_signal_handler(number, lambda number=number: stopped.done() or stopped.set_result(number))
    ready()
    log.info("dice-lsp %s serving (pid %d)", __version__, os.getpid())
    connection = asyncio.ensure_future(_connection(ls, connect))
    try:
        await asyncio.wait([connection, stopped], return_when=asyncio.FIRST_COMPLETED)
        if not stopped.done():
            return connection.result()
        log.info("stopping on %s", signal.Signals(stopped.result()).name)
        return 128 + stopped.result()
    finally:
        for number in SIGNALS:  # a second signal while closing ends the process at once
            loop.remove_signal_handler(number)
            signal.signal(number, signal.SIG_DFL)
        connection.cancel()
        stop()
        protocol = ls.protocol
        assert isinstance(protocol, DiceProtocol)
        await protocol.cancel_commands()  # each answers as cancelled, now that what it waited for has ended


async def _connection(ls: LanguageServer, connect: Connect) -> int:
    reader, writer = await connect()
    ls.protocol.set_writer(writer)
    try:
        await run_async(stop_event=threading.Event(), reader=reader, protocol=ls.protocol, logger=log,
                        error_handler=ls.report_server_error)
    except SystemExit as exit:  # pygls ends the `exit` notification with sys.exit(0 after shutdown, else 1)
        return int(exit.code or 0)
    return 0  # the client closed the connection


def stdio() -> Connect:
    async def connect() -> tuple[Any, Any]:
        return StdinReader(sys.stdin.fileno()), StdoutWriter(sys.stdout.buffer)
    return connect


def tcp(host: str, port: int, listening: Callable[[str, int], None]) -> Connect:
    """Listen on host:port and serve the first client that connects; `listening(host, port)` is told the address
    (port 0 picks a free one). The socket is bound here, before serving starts, so that a port already in use is an
    OSError the command line can say in one line, not a traceback out of the event loop."""
    socket_ = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)

    async def connect() -> tuple[Any, Any]:
        client: asyncio.Future = asyncio.get_running_loop().create_future()

        def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if client.done():
                writer.close()  # one client a server, as an editor starts it
            else:
                client.set_result((reader, writer))

        listener = await asyncio.start_server(accept, sock=socket_)
        listening(*listener.sockets[0].getsockname()[:2])
        try:
            return await client
        finally:
            listener.close()
    return connect


class StdinReader:
    """pygls' reader interface over a file descriptor (stdin's), read on a daemon thread of its own with os.read.
    (pygls reads sys.stdin on a pool thread, which Python waits for at exit, so a server waiting on stdin could not
    end on Ctrl-C; and a thread blocked inside sys.stdin's buffer holds its lock, which Python needs at exit.)"""

    def __init__(self, descriptor: int) -> None:
        self.descriptor = descriptor
        self.buffer = bytearray()
        self.calls: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="dice-stdin", daemon=True).start()

    def readline(self) -> asyncio.Future:
        return self._call(self._readline)

    def readexactly(self, size: int) -> asyncio.Future:
        return self._call(self._read, size)

    def _readline(self) -> bytes:
        while b"\n" not in self.buffer and self._fill(1 << 16):
            pass
        end = self.buffer.find(b"\n") + 1 or len(self.buffer)
        return self._take(end)

    def _read(self, size: int) -> bytes:
        while len(self.buffer) < size and self._fill(size - len(self.buffer)):
            pass
        return self._take(min(size, len(self.buffer)))

    def _fill(self, size: int) -> bool:
        """Read what is there (up to `size` bytes, at least 64 KiB asked); False at the end of the stream."""
        try:
            chunk = os.read(self.descriptor, max(size, 1 << 16))
        except OSError:  # closed under us: the end of the connection
            return False
        self.buffer += chunk
        return bool(chunk)

    def _take(self, size: int) -> bytes:
        out = bytes(self.buffer[:size])
        del self.buffer[:size]
        return out

    def _call(self, method: Callable, *args: Any) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.calls.put((loop, future, method, args))
        return future

    def _serve(self) -> None:
        while True:
            loop, future, method, args = self.calls.get()
            value = method(*args)
            try:
                loop.call_soon_threadsafe(_settle, future, value)
            except RuntimeError:  # the loop has closed: nobody waits for this read
                return


def _settle(future: asyncio.Future, value: bytes) -> None:
    if not future.done():
        future.set_result(value)
