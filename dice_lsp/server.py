"""The language server: registers LSP handlers that turn params into calls on the Session (dice_lsp/session.py, where
the logic lives, free of pygls) and its answers into LSP types (dice_lsp/convert.py), and serves one client over
stdio or TCP until it exits or SIGINT/SIGTERM ends the server with every check and worker closed.

`LspEditor` is the session's editor over this connection: diagnostics, messages, status, progress, edits and the
settings, each used only as far as the client said it supports it. Diagnostics are pulled (LSP 3.17
textDocument/diagnostic) by a client that can pull them and be asked to pull again, and pushed to any other, never
both: an editor shows each set it gets, so both would show every diagnostic twice (ruff's server does the same).
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import re
import signal
import socket
import sys
import threading
from dataclasses import dataclass
from typing import Any, Awaitable, Callable
from uuid import uuid4

import cattrs
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams, JsonRpcRequestCancelled
from pygls.io_ import StdoutWriter, run_async
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol, lsp_method

from dice_lsp import __version__, actions, convert, status
from dice_lsp.anatomy import Span
from dice_lsp.editor import Applied, NoProgress, ProgressReport, Severity, Snapshot
from dice_lsp.session import Session

log = logging.getLogger("dice_lsp")
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class LspProgress:
    """A long job's progress as LSP work-done progress; the user can cancel it there."""

    def __init__(self, server: LanguageServer, token: str) -> None:
        self.server, self.token = server, token
        self.ended = False

    @property
    def cancelled(self) -> bool:
        future = self.server.work_done_progress.tokens.get(self.token)
        return future is not None and future.cancelled()

    def report(self, message: str) -> None:
        if self.ended:  # a stage of a check already replaced or finished: LSP allows no report after the end
            return
        self.server.work_done_progress.report(self.token, types.WorkDoneProgressReport(message=message))

    def end(self, message: str) -> None:
        if self.ended:
            return
        self.ended = True
        self.server.work_done_progress.end(self.token, types.WorkDoneProgressEnd(message=message))
        self.server.work_done_progress.tokens.pop(self.token, None)


def pulls_diagnostics(capabilities: types.ClientCapabilities) -> bool:
    """Whether the client pulls diagnostics and can be asked to pull again (workspace/diagnostic/refresh). Both, since
    a file's diagnostics change with no edit of it: a check's result arrives a minute after the save, and a client
    that could not be told would show it only after the next edit. Any other client gets them pushed."""
    document, workspace = capabilities.text_document, capabilities.workspace
    return document is not None and document.diagnostic is not None and workspace is not None and \
        workspace.diagnostics is not None and bool(workspace.diagnostics.refresh_support)


def shows_related(capabilities: types.ClientCapabilities) -> bool:
    """Whether the client shows a diagnostic's related locations. A pulling client may say so only for pushed
    diagnostics (relatedInformation came to the pull capabilities in LSP 3.18): it is one view either way."""
    document = capabilities.text_document
    if document is None:
        return False
    pushed = document.publish_diagnostics is not None and bool(document.publish_diagnostics.related_information)
    pulled = document.diagnostic is not None and bool(document.diagnostic.related_information)
    return pushed or pulls_diagnostics(capabilities) and pulled


def _answered(future) -> None:
    """A refresh the client refused or never answered: the next change asks again; nothing to do but say so."""
    if not future.cancelled() and future.exception() is not None:
        log.info("workspace/diagnostic/refresh failed: %s", future.exception())


class LspEditor:
    """The session's Editor (dice_lsp.session.Editor) over this LSP connection."""

    def __init__(self, server: DiceServer) -> None:
        self.server = server
        self.refresh_asked = False  # a workspace/diagnostic/refresh is on its way this turn of the loop

    @property
    def capabilities(self) -> types.ClientCapabilities:
        return self.server.client_capabilities

    def diagnostics(self, snapshot: Snapshot) -> list[types.Diagnostic]:
        """The file's diagnostics as the client shows them, pushed or pulled alike."""
        places = None
        if shows_related(self.capabilities):
            reference = snapshot.reference
            places = convert.Places(snapshot.uri, reference.path.as_uri() if reference and reference.path else None,
                                    reference.text if reference else None)
        return convert.document_diagnostics(snapshot.anatomy, snapshot.reference_problem, snapshot.current_report,
                                            self.server.encoding, places)

    def publish(self, snapshot: Snapshot) -> None:
        if pulls_diagnostics(self.capabilities):
            self.ask_to_pull()
            return
        self.server.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
            uri=snapshot.uri, diagnostics=self.diagnostics(snapshot), version=snapshot.version))

    def clear(self, uri: str) -> None:
        if not pulls_diagnostics(self.capabilities):  # a pulling client drops a closed file's diagnostics itself
            self.server.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    def ask_to_pull(self) -> None:
        """workspace/diagnostic/refresh, once for every change made in this turn of the loop (a settings change
        analyses every open file: one refresh pulls them all)."""
        if self.refresh_asked:
            return
        self.refresh_asked = True

        def ask() -> None:
            self.refresh_asked = False
            self.server.workspace_diagnostic_refresh(None).add_done_callback(_answered)
        asyncio.get_running_loop().call_soon(ask)

    def show(self, severity: Severity, message: str) -> None:
        self.server.window_show_message(convert.message(severity, message))

    def status(self, message: status.Status) -> None:
        self.server.protocol.notify(status.METHOD, message.params())

    def refresh_views(self) -> None:
        workspace = self.capabilities.workspace
        if workspace is not None and workspace.code_lens is not None and workspace.code_lens.refresh_support:
            self.server.workspace_code_lens_refresh(None)
        if workspace is not None and workspace.inlay_hint is not None and workspace.inlay_hint.refresh_support:
            self.server.workspace_inlay_hint_refresh(None)

    async def configuration(self) -> Any:
        workspace = self.capabilities.workspace
        if workspace is None or not workspace.configuration:  # asked only of a client that says it answers
            return None
        try:
            result = await self.server.workspace_configuration_async(
                types.ConfigurationParams(items=[types.ConfigurationItem(section="dice")]))
        except Exception as error:  # noqa: BLE001  (a client that fails to answer keeps the settings it gave)
            log.info("workspace/configuration failed: %s", error)
            return None
        return result[0] if result else None

    async def progress(self, title: str) -> ProgressReport:
        window = self.capabilities.window
        if window is None or not window.work_done_progress:
            return NoProgress()
        token = str(uuid4())
        progress = self.server.work_done_progress
        try:
            await progress.create_async(token)
        except Exception as error:  # noqa: BLE001  (the job runs all the same, without progress)
            log.info("window/workDoneProgress/create failed: %s", error)
            return NoProgress()
        progress.begin(token, types.WorkDoneProgressBegin(title=title, cancellable=True))
        return LspProgress(self.server, token)

    async def apply(self, uri: str, version: int, edit: actions.Replace, label: str) -> Applied:
        workspace = self.capabilities.workspace
        annotations = workspace is not None and workspace.workspace_edit is not None and \
            workspace.workspace_edit.change_annotation_support is not None
        change = convert.replace_edit(uri, version, edit.within, edit.span, edit.text, self.server.encoding,
                                      confirm=label if annotations else None)
        result = await self.server.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(edit=change, label=label))
        return Applied(bool(result.applied), result.failure_reason or "")

    async def show_document(self, uri: str) -> bool:
        window = self.capabilities.window
        if window is None or window.show_document is None or not window.show_document.support:
            return False
        try:
            result = await self.server.window_show_document_async(types.ShowDocumentParams(uri=uri, take_focus=True))
        except Exception as error:  # noqa: BLE001
            log.info("window/showDocument failed: %s", error)
            return False
        return bool(result.success)


@dataclass(frozen=True)
class Unreadable:
    """A message whose params do not fit its method: a request is answered with InvalidParams, a notification is
    dropped (JSON-RPC answers none); neither goes further."""

    id: int | str | None
    method: str
    why: str


class DiceProtocol(LanguageServerProtocol):
    """pygls' protocol, except that a message whose params do not fit its method is one warning in the log, and a
    request of that kind gets an InvalidParams error saying which field is wrong. (pygls logs a traceback of every
    nested cattrs error for it, answers nothing, and shows the user "Error in server"; the client would wait for the
    answer for ever.) Errors that pygls raises for a request's params later on (a command's arguments) are answered
    the same way."""

    def structure_message(self, data: dict[str, Any]):
        method = data.get("method")
        if "jsonrpc" not in data or "error" in data or not isinstance(method, str) or \
                self.get_message_type(method) is None:
            return super().structure_message(data)  # responses, and methods lsprotocol has no type for
        try:  # pygls' own structuring of a typed request or notification, without its traceback in the log
            return self._converter.structure(data, self.get_message_type(method))
        except Exception as error:  # noqa: BLE001  (any params that do not structure are the client's mistake)
            why = "; ".join(_json_path(line) for line in cattrs.transform_error(error)) \
                if isinstance(error, cattrs.BaseValidationError) else f"{type(error).__name__}: {error}"
            return Unreadable(data.get("id"), method, why)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands: dict[int | str, asyncio.Task] = {}  # running commands by request id, for $/cancelRequest

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams):
        """pygls' initialize, except that only a client that pulls diagnostics (pulls_diagnostics) is offered them:
        any other gets them pushed, and one that could pull but not be asked to pull again would otherwise pull and
        be pushed to, and show each diagnostic twice."""
        result = yield from super().lsp_initialize(params)
        if not pulls_diagnostics(params.capabilities):
            result.capabilities.diagnostic_provider = None
        return result

    def _handle_cancel_notification(self, msg_id: int | str) -> None:
        """$/cancelRequest of a running command cancels its task, so what it started stops too (pygls cancels only
        the future of its own executeCommand handler: the answer went out at once while decoding went on); the
        command then answers as cancelled."""
        task = self.commands.pop(msg_id, None)
        if task is None:
            super()._handle_cancel_notification(msg_id)
        else:
            task.cancel()

    def _send_handler_result(self, future, *, msg_id: int | str) -> None:
        error = None if future.cancelled() else future.exception()
        # A cancel or the client's own wrong params is an answer, not an error worth a traceback in the log
        if isinstance(error, (JsonRpcRequestCancelled, JsonRpcInvalidParams)):
            self._request_futures.pop(msg_id, None)
            if isinstance(error, JsonRpcInvalidParams):
                log.warning("request %s: %s", msg_id, error.message)
            self._send_response(msg_id, error=error.to_response_error())
            return
        super()._send_handler_result(future, msg_id=msg_id)

    def handle_message(self, message) -> None:
        if isinstance(message, Unreadable):
            if message.id is None:
                log.warning("%s with invalid params, ignored: %s", message.method, message.why)
                return
            log.warning("%s with invalid params: %s", message.method, message.why)
            self._send_response(message.id, error=JsonRpcInvalidParams(
                f"invalid params for {message.method}: {message.why}").to_response_error())
            return
        super().handle_message(message)


def _json_path(line: str) -> str:
    """cattrs names fields as lsprotocol's classes do (text_document); the client wrote them in JSON (textDocument)."""
    what, at, path = line.rpartition(" @ ")
    return f"{what}{at}{re.sub(r'_([a-z])', lambda m: m.group(1).upper(), path)}" if at else line


class DiceServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("dice-lsp", __version__, protocol_cls=DiceProtocol)
        self.editor = LspEditor(self)
        self.session = Session(self.editor)
        self.initialization_options: Any = None

    @property
    def encoding(self) -> str:
        encoding = self.workspace.position_encoding or "utf-16"
        return str(getattr(encoding, "value", encoding))


server = DiceServer()


@server.feature(types.INITIALIZE)
def initialize(ls: DiceServer, params: types.InitializeParams) -> None:
    ls.initialization_options = params.initialization_options


@server.feature(types.INITIALIZED)
async def initialized(ls: DiceServer, params: types.InitializedParams) -> None:
    await ls.session.initialized(ls.initialization_options)
    workspace = ls.client_capabilities.workspace
    dynamic = workspace is not None and workspace.did_change_configuration is not None and \
        workspace.did_change_configuration.dynamic_registration
    if dynamic:  # VS Code sends didChangeConfiguration only to servers that register for it
        try:
            await ls.client_register_capability_async(types.RegistrationParams(registrations=[types.Registration(
                id="dice-configuration", method=types.WORKSPACE_DID_CHANGE_CONFIGURATION, register_options={})]))
        except Exception as error:  # noqa: BLE001
            log.info("could not register for configuration changes: %s", error)


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
async def did_change_configuration(ls: DiceServer, params: types.DidChangeConfigurationParams) -> None:
    await ls.session.configuration_changed(params.settings)


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: DiceServer, params: types.DidOpenTextDocumentParams) -> None:
    document = params.text_document
    ls.session.open(document.uri, document.text, document.version)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: DiceServer, params: types.DidChangeTextDocumentParams) -> None:
    uri = params.text_document.uri
    # pygls applied the (incremental) changes to its copy before this handler: the session gets the whole text.
    ls.session.change(uri, ls.workspace.get_text_document(uri).source, params.text_document.version)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
def did_save(ls: DiceServer, params: types.DidSaveTextDocumentParams) -> None:
    ls.session.save(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: DiceServer, params: types.DidCloseTextDocumentParams) -> None:
    ls.session.close(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DIAGNOSTIC, types.DiagnosticOptions(
    identifier=convert.SOURCE, inter_file_dependencies=False, workspace_diagnostics=False))
def diagnostic(ls: DiceServer, params: types.DocumentDiagnosticParams) -> types.DocumentDiagnosticReport:
    """The file's diagnostics from its latest snapshot, the same set a push would carry ("unchanged" when they are
    what the client holds from `previous_result_id`)."""
    diagnostics = ls.editor.diagnostics(ls.session.snapshot(params.text_document.uri))
    return convert.diagnostic_report(diagnostics, params.previous_result_id)


@server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(code_action_kinds=[
    types.CodeActionKind.QuickFix, types.CodeActionKind.RefactorRewrite, types.CodeActionKind.Source]))
def code_action(ls: DiceServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    uri = params.text_document.uri
    snapshot = ls.session.snapshot(uri)
    text = snapshot.anatomy.text
    start, end = (convert.offset(text, position, ls.encoding) for position in (params.range.start, params.range.end))
    fixes = convert.quick_fixes(ls.session.fixes(uri, Span(start, end)), uri, snapshot.version, text, ls.encoding)
    return fixes + convert.code_actions(ls.session.offers(uri, start), uri)


@server.feature(types.TEXT_DOCUMENT_CODE_LENS)
def code_lens(ls: DiceServer, params: types.CodeLensParams) -> list[types.CodeLens]:
    uri = params.text_document.uri
    snapshot = ls.session.snapshot(uri)
    return convert.code_lenses(snapshot.anatomy, snapshot.report, actions.lenses(snapshot.anatomy), uri, ls.encoding)


@server.feature(types.TEXT_DOCUMENT_INLAY_HINT)
def inlay_hint(ls: DiceServer, params: types.InlayHintParams) -> list[types.InlayHint]:
    snapshot = ls.session.snapshot(params.text_document.uri)
    lines = range(params.range.start.line, params.range.end.line + 1)
    return convert.inlay_hints(snapshot.anatomy, snapshot.current_report, ls.encoding, lines)


@server.feature(types.TEXT_DOCUMENT_HOVER)
def hover(ls: DiceServer, params: types.HoverParams) -> types.Hover | None:
    snapshot = ls.session.snapshot(params.text_document.uri)
    offset = convert.offset(snapshot.anatomy.text, params.position, ls.encoding)
    return convert.hover(convert.kernel_hover(snapshot.anatomy, snapshot.current_report, offset))


@server.command(actions.GENERATE)
async def command_generate(ls: DiceServer, uri: str) -> dict:
    return await answer(ls, ls.session.generate(uri, infill=False))


@server.command(actions.INFILL)
async def command_infill(ls: DiceServer, uri: str) -> dict:
    return await answer(ls, ls.session.generate(uri, infill=True))


@server.command(actions.BENCHMARK)
async def command_benchmark(ls: DiceServer, uri: str) -> dict:
    return await answer(ls, ls.session.benchmark(uri))


async def answer(ls: DiceServer, work: Awaitable) -> dict:
    """A command's answer as JSON; while it runs, a $/cancelRequest of its request cancels it (DiceProtocol), and it
    is answered as cancelled once the session has stopped what it started."""
    request = ls.protocol.msg_id
    ls.protocol.commands[request] = asyncio.current_task()
    try:
        return convert.command_result(await work)
    except asyncio.CancelledError:
        raise JsonRpcRequestCancelled(f"request {request} was cancelled") from None
    finally:
        ls.protocol.commands.pop(request, None)


@server.feature(types.SHUTDOWN)
def shutdown(ls: DiceServer, params: None) -> None:
    ls.session.shutdown()


# -- the transport: one client, and an end that leaves nothing running ------------------------------------------------
Connect = Callable[[], Awaitable[tuple[Any, Any]]]  # (reader, writer) in pygls' reader and writer interfaces


def serve(connect: Connect, ready: Callable[[], None] = lambda: None, ls: DiceServer = server) -> int:
    """Serve the client `connect` brings until it exits (status 0 after a shutdown request, else 1) or SIGINT or
    SIGTERM arrives (128 + its number, as a shell reports it): either way every check is cancelled and every worker
    and the generation child are ended before this returns. A second signal ends the process at once. `ready()` is
    called once signals are handled so."""
    return asyncio.run(_serve(connect, ready, ls))


async def _serve(connect: Connect, ready: Callable[[], None], ls: DiceServer) -> int:
    loop = asyncio.get_running_loop()
    stopped: asyncio.Future[int] = loop.create_future()
    for number in SIGNALS:
        loop.add_signal_handler(number, lambda number=number: stopped.done() or stopped.set_result(number))
    ready()
    log.info("dice-lsp %s serving (pid %d)", __version__, os.getpid())
    connection = asyncio.ensure_future(_connection(connect, ls))
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
        ls.session.shutdown()
        commands = list(ls.protocol.commands.values())
        for task in commands:  # each answers as cancelled, now that what it waited for has ended
            task.cancel()
        await asyncio.gather(*commands, return_exceptions=True)


async def _connection(connect: Connect, ls: DiceServer) -> int:
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
