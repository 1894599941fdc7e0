"""The language server: registers LSP handlers that turn params into calls on the Session (dice_lsp/session.py, where
the logic lives, free of pygls) and its answers into LSP types (dice_lsp/convert.py).

`LspEditor` is the session's editor over this connection: diagnostics, messages, status, progress and edits.
"""

from __future__ import annotations

import logging
from typing import Any
from uuid import uuid4

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from dice_lsp import __version__, actions, convert, status
from dice_lsp.session import Applied, NoProgress, ProgressReport, Session, Severity, Snapshot

log = logging.getLogger("dice_lsp")


class LspProgress:
    """A generation's progress as LSP work-done progress; the user can cancel it there."""

    def __init__(self, server: LanguageServer, token: str) -> None:
        self.server, self.token = server, token

    @property
    def cancelled(self) -> bool:
        future = self.server.work_done_progress.tokens.get(self.token)
        return future is not None and future.cancelled()

    def report(self, message: str) -> None:
        self.server.work_done_progress.report(self.token, types.WorkDoneProgressReport(message=message))

    def end(self, message: str) -> None:
        self.server.work_done_progress.end(self.token, types.WorkDoneProgressEnd(message=message))


class LspEditor:
    """The session's Editor (dice_lsp.session.Editor) over this LSP connection."""

    def __init__(self, server: DiceServer) -> None:
        self.server = server

    def publish(self, snapshot: Snapshot) -> None:
        diagnostics = convert.document_diagnostics(snapshot.anatomy, snapshot.reference_problem,
                                                   snapshot.current_report, self.server.encoding)
        self.server.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
            uri=snapshot.uri, diagnostics=diagnostics, version=snapshot.version))

    def clear(self, uri: str) -> None:
        self.server.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    def show(self, severity: Severity, message: str) -> None:
        self.server.window_show_message(convert.message(severity, message))

    def status(self, message: status.Status) -> None:
        self.server.protocol.notify(status.METHOD, message.params())

    def refresh_code_lenses(self) -> None:
        workspace = self.server.client_capabilities.workspace
        if workspace is not None and workspace.code_lens is not None and workspace.code_lens.refresh_support:
            self.server.workspace_code_lens_refresh(None)

    async def configuration(self) -> Any:
        try:
            result = await self.server.workspace_configuration_async(
                types.ConfigurationParams(items=[types.ConfigurationItem(section="dice")]))
        except Exception as error:  # a client without workspace/configuration keeps the defaults
            log.info("workspace/configuration failed: %s", error)
            return None
        return result[0] if result else None

    async def progress(self, title: str) -> ProgressReport:
        token = str(uuid4())
        progress = self.server.work_done_progress
        try:
            await progress.create_async(token)
            progress.begin(token, types.WorkDoneProgressBegin(title=title, cancellable=True, message="starting"))
        except Exception:  # a client that shows no progress: generation runs all the same
            return NoProgress()
        return LspProgress(self.server, token)

    async def apply(self, uri: str, version: int, edit: actions.Replace | actions.NewFile, label: str) -> Applied:
        if isinstance(edit, actions.Replace):
            change = convert.replace_edit(uri, version, edit.within, edit.span, edit.text, self.server.encoding)
        else:
            change = convert.new_file_edit(edit.path, edit.text)
        result = await self.server.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(edit=change, label=label))
        return Applied(bool(result.applied), result.failure_reason or "")


class DiceServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("dice-lsp", __version__)
        self.session = Session(LspEditor(self))

    @property
    def encoding(self) -> str:
        encoding = self.workspace.position_encoding or "utf-16"
        return str(getattr(encoding, "value", encoding))


server = DiceServer()


@server.feature(types.INITIALIZED)
async def initialized(ls: DiceServer, params: types.InitializedParams) -> None:
    await ls.session.initialized()
    workspace = ls.client_capabilities.workspace
    dynamic = workspace is not None and workspace.did_change_configuration is not None and \
        workspace.did_change_configuration.dynamic_registration
    if dynamic:  # VS Code sends didChangeConfiguration only to servers that register for it
        try:
            await ls.client_register_capability_async(types.RegistrationParams(registrations=[types.Registration(
                id="dice-configuration", method=types.WORKSPACE_DID_CHANGE_CONFIGURATION, register_options={})]))
        except Exception as error:
            log.info("could not register for configuration changes: %s", error)


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
async def did_change_configuration(ls: DiceServer, params: types.DidChangeConfigurationParams) -> None:
    await ls.session.configuration_changed()


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


@server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
    code_action_kinds=[types.CodeActionKind.RefactorRewrite, types.CodeActionKind.Source]))
def code_action(ls: DiceServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    uri = params.text_document.uri
    offset = convert.offset(ls.session.snapshot(uri).anatomy.text, params.range.start, ls.encoding)
    return convert.code_actions(ls.session.offers(uri, offset), uri)


@server.feature(types.TEXT_DOCUMENT_CODE_LENS)
def code_lens(ls: DiceServer, params: types.CodeLensParams) -> list[types.CodeLens]:
    uri = params.text_document.uri
    snapshot = ls.session.snapshot(uri)
    return convert.code_lenses(snapshot.anatomy, snapshot.report, actions.lenses(snapshot.anatomy), uri, ls.encoding)


@server.feature(types.TEXT_DOCUMENT_HOVER)
def hover(ls: DiceServer, params: types.HoverParams) -> types.Hover | None:
    snapshot = ls.session.snapshot(params.text_document.uri)
    offset = convert.offset(snapshot.anatomy.text, params.position, ls.encoding)
    return convert.hover(convert.kernel_hover(snapshot.anatomy, snapshot.current_report, offset))


@server.command(actions.GENERATE)
async def command_generate(ls: DiceServer, uri: str) -> dict:
    return convert.command_result(await ls.session.generate(uri, infill=False))


@server.command(actions.INFILL)
async def command_infill(ls: DiceServer, uri: str) -> dict:
    return convert.command_result(await ls.session.generate(uri, infill=True))


@server.command(actions.BENCHMARK)
async def command_benchmark(ls: DiceServer, uri: str) -> dict:
    return convert.command_result(ls.session.benchmark(uri))


@server.feature(types.SHUTDOWN)
def shutdown(ls: DiceServer, params: None) -> None:
    ls.session.shutdown()
