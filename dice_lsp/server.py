"""The language server's handlers: each turns LSP params into a call on the session (dice_lsp/session/, where the
logic lives, free of pygls) and its answer into LSP types (dice_lsp/convert.py). Nothing else happens here.

pygls as we adapt it (the protocol, the session's editor over LSP, the transport) is in dice_lsp/lsp/; `dice-lsp
serve` (dice_lsp/commands/serve.py) serves `server` over stdio or TCP with dice_lsp/lsp/transport.py.
"""

from __future__ import annotations

from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from dice_lsp import __version__, actions, convert
from dice_lsp.anatomy import Span
from dice_lsp.lsp.editor import LspEditor
from dice_lsp.lsp.protocol import DiceProtocol
from dice_lsp.session import Session, checks, generate, notifications


class DiceServer(LanguageServer):
    """pygls' server with our protocol, the session, and the editor the session speaks to over this connection."""

    protocol: DiceProtocol

    def __init__(self) -> None:
        super().__init__("dice-lsp", __version__, protocol_cls=DiceProtocol)
        self.editor = LspEditor(self)
        self.session = Session(self.editor)
        self.initialization_options: Any = None

    @property
    def encoding(self) -> str:
        return self.editor.encoding


server = DiceServer()


# -- lifecycle and settings -------------------------------------------------------------------------------------------
@server.feature(types.INITIALIZE)
def initialize(ls: DiceServer, params: types.InitializeParams) -> None:
    ls.initialization_options = params.initialization_options


@server.feature(types.INITIALIZED)
async def initialized(ls: DiceServer, params: types.InitializedParams) -> None:
    await notifications.initialized(ls.session, ls.initialization_options)
    await ls.editor.watch_configuration()


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
async def did_change_configuration(ls: DiceServer, params: types.DidChangeConfigurationParams) -> None:
    await notifications.configuration_changed(ls.session, params.settings)


@server.feature(types.SHUTDOWN)
def shutdown(ls: DiceServer, params: None) -> None:
    ls.session.shutdown()


# -- documents --------------------------------------------------------------------------------------------------------
@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: DiceServer, params: types.DidOpenTextDocumentParams) -> None:
    document = params.text_document
    notifications.open(ls.session, document.uri, document.text, document.version)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: DiceServer, params: types.DidChangeTextDocumentParams) -> None:
    uri = params.text_document.uri
    # pygls applied the (incremental) changes to its copy before this handler: the session gets the whole text.
    notifications.change(ls.session, uri, ls.workspace.get_text_document(uri).source, params.text_document.version)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
def did_save(ls: DiceServer, params: types.DidSaveTextDocumentParams) -> None:
    notifications.save(ls.session, params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: DiceServer, params: types.DidCloseTextDocumentParams) -> None:
    notifications.close(ls.session, params.text_document.uri)


# -- what the editor shows for a file ---------------------------------------------------------------------------------
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
    fixes = actions.fixes(snapshot.anatomy, Span(start, end))
    return convert.quick_fixes(fixes, uri, snapshot.version, text, ls.encoding) + \
        convert.code_actions(actions.offers(snapshot.anatomy, start), uri)


@server.feature(types.TEXT_DOCUMENT_CODE_LENS)
async def code_lens(ls: DiceServer, params: types.CodeLensParams) -> list[types.CodeLens]:
    uri = params.text_document.uri
    anatomy = await ls.session.shown_anatomy(uri)
    return convert.code_lenses(anatomy, ls.session.snapshot(uri).report, actions.lenses(anatomy), uri, ls.encoding)


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


# -- commands: a $/cancelRequest of one stops what it started (DiceProtocol.command) ----------------------------------
@server.command(actions.GENERATE)
async def command_generate(ls: DiceServer, uri: str) -> dict:
    return convert.command_result(await ls.protocol.command(generate.solution(ls.session, uri)))


@server.command(actions.INFILL)
async def command_infill(ls: DiceServer, uri: str) -> dict:
    return convert.command_result(await ls.protocol.command(generate.infill(ls.session, uri)))


@server.command(actions.BENCHMARK)
async def command_benchmark(ls: DiceServer, uri: str) -> dict:
    return convert.command_result(await ls.protocol.command(checks.benchmark(ls.session, uri)))
