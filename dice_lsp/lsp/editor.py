"""The session's `Editor` (dice_lsp/session/editor.py) over an LSP connection: diagnostics, messages, status,
progress, edits and the settings, each used only as far as the client said it supports it (lsp/capabilities.py).

Diagnostics are pulled (LSP 3.17 textDocument/diagnostic) by a client that can pull them and be asked to pull again,
and pushed to any other, never both: an editor shows each set it gets, so both would show every diagnostic twice
(ruff's server does the same).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from uuid import uuid4

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from dice_lsp import actions, convert, status
from dice_lsp.session.editor import Applied, NoProgress, ProgressReport, Severity, Snapshot
from dice_lsp.lsp import capabilities as can

log = logging.getLogger("dice_lsp")


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


class LspEditor:
    """The session's Editor (dice_lsp.session.editor.Editor) over the connection `server` serves."""

    def __init__(self, server: LanguageServer) -> None:
        self.server = server
        self.refresh_asked = False  # a workspace/diagnostic/refresh is on its way this turn of the loop

    @property
    def capabilities(self) -> types.ClientCapabilities:
        return self.server.client_capabilities

    @property
    def encoding(self) -> str:
        """How the client counts a position's character: "utf-16" (LSP's default), "utf-8" or "utf-32"."""
        encoding = self.server.workspace.position_encoding or "utf-16"
        return str(getattr(encoding, "value", encoding))

    def diagnostics(self, snapshot: Snapshot) -> list[types.Diagnostic]:
        """The file's diagnostics as the client shows them, pushed or pulled alike."""
        places = None
        if can.shows_related(self.capabilities):
            reference = snapshot.reference
            places = convert.Places(snapshot.uri, reference.path.as_uri() if reference and reference.path else None,
                                    reference.text if reference else None)
        return convert.document_diagnostics(snapshot.anatomy, snapshot.reference_problem, snapshot.current_report,
                                            self.encoding, places)

    def publish(self, snapshot: Snapshot) -> None:
        if can.pulls_diagnostics(self.capabilities):
            self.ask_to_pull()
            return
        self.server.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
            uri=snapshot.uri, diagnostics=self.diagnostics(snapshot), version=snapshot.version))

    def clear(self, uri: str) -> None:
        if not can.pulls_diagnostics(self.capabilities):  # a pulling client drops a closed file's diagnostics itself
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

    def status(self, message: status.ServerStatus) -> None:
        self.server.protocol.notify(status.METHOD, message.params())

    def refresh_views(self) -> None:
        if can.refreshes_code_lenses(self.capabilities):
            self.server.workspace_code_lens_refresh(None)
        if can.refreshes_inlay_hints(self.capabilities):
            self.server.workspace_inlay_hint_refresh(None)

    async def configuration(self) -> Any:
        if not can.answers_configuration(self.capabilities):  # asked only of a client that says it answers
            return None
        try:
            result = await self.server.workspace_configuration_async(
                types.ConfigurationParams(items=[types.ConfigurationItem(section="dice")]))
        except Exception as error:  # noqa: BLE001  (a client that fails to answer keeps the settings it gave)
            log.info("workspace/configuration failed: %s", error)
            return None
        return result[0] if result else None

    async def watch_configuration(self) -> None:
        """Register for didChangeConfiguration where the client sends it only to servers that register for it."""
        if not can.registers_configuration_changes(self.capabilities):
            return
        try:
            await self.server.client_register_capability_async(types.RegistrationParams(registrations=[
                types.Registration(id="dice-configuration", method=types.WORKSPACE_DID_CHANGE_CONFIGURATION,
                                   register_options={})]))
        except Exception as error:  # noqa: BLE001
            log.info("could not register for configuration changes: %s", error)

    async def progress(self, title: str) -> ProgressReport:
        if not can.shows_progress(self.capabilities):
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
        confirm = label if can.confirms_edits(self.capabilities) else None
        change = convert.replace_edit(uri, version, edit.within, edit.span, edit.text, self.encoding, confirm=confirm)
        result = await self.server.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(edit=change, label=label))
        return Applied(bool(result.applied), result.failure_reason or "")

    async def show_document(self, uri: str) -> bool:
        if not can.shows_documents(self.capabilities):
            return False
        try:
            result = await self.server.window_show_document_async(types.ShowDocumentParams(uri=uri, take_focus=True))
        except Exception as error:  # noqa: BLE001
            log.info("window/showDocument failed: %s", error)
            return False
        return bool(result.success)


def _answered(future) -> None:
    """A refresh the client refused or never answered: the next change asks again; nothing to do but say so."""
    if not future.cancelled() and future.exception() is not None:
        log.info("workspace/diagnostic/refresh failed: %s", future.exception())
