"""A real dice-lsp server process driven by pytest-lsp's client over stdio.

Tests wait on what the server sends (diagnostics, `dice/status`), never on the clock: the cores are shared.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from dice_lsp import status

FILES = Path(__file__).parent.parent / "anatomy" / "files"


def settings(**overrides) -> dict:
    base = {"trustedWorkspace": False, "runOnSave": True, "timingTrials": 20, "correctnessTrials": 5}
    base.update(overrides)
    return base


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "dice_lsp"]))
async def client(lsp_client: LanguageClient, tmp_path):
    lsp_client.set_configuration(settings(), section="dice")
    lsp_client.applied_edits = []
    lsp_client.statuses = []

    @lsp_client.feature(status.METHOD)
    def record_status(params) -> None:
        lsp_client.statuses.append(params)

    @lsp_client.feature(types.WORKSPACE_APPLY_EDIT)
    def apply_edit(params: types.ApplyWorkspaceEditParams) -> types.ApplyWorkspaceEditResult:
        lsp_client.applied_edits.append(params)
        return types.ApplyWorkspaceEditResult(applied=True)

    await lsp_client.initialize_session(types.InitializeParams(
        capabilities=types.ClientCapabilities(
            window=types.WindowClientCapabilities(work_done_progress=True),
            workspace=types.WorkspaceClientCapabilities(configuration=True, apply_edit=True,
                                                        workspace_edit=types.WorkspaceEditClientCapabilities(
                                                            document_changes=True)),
        ),
        root_uri=tmp_path.as_uri(),
    ))
    yield
    await lsp_client.shutdown_session()


async def status_reached(client: LanguageClient, uri: str, state: str):
    """The first `dice/status` of `state` about `uri`, once the server has sent it."""
    while True:
        for params in client.statuses:
            if getattr(params, "state", None) == state and getattr(params, "uri", None) == uri:
                return params
        await client.wait_for_notification(status.METHOD)


async def opened(client: LanguageClient, path: Path, text: str | None = None) -> str:
    """Open `path` (with `text`, else its contents) and wait for its first diagnostics; its uri."""
    uri = path.as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
        uri=uri, language_id="python", version=1, text=path.read_text() if text is None else text)))
    while uri not in client.diagnostics:
        await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    return uri


async def configure(client: LanguageClient, **overrides) -> None:
    """Change the `dice` settings (the fixture's, with `overrides`) and wait until the server has read them: it then
    analyses every open file again and publishes its diagnostics, so at least one file must be open."""
    assert client.diagnostics, "open a file first: its diagnostics are what show the new settings arrived"
    republished = client.protocol.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    client.set_configuration(settings(**overrides), section="dice")
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    await asyncio.wrap_future(republished)


@pytest.fixture(scope="session")
def events():
    """`events.opened`, `events.configure`, `events.status_reached`: waits on what the server sends."""
    return SimpleNamespace(opened=opened, configure=configure, status_reached=status_reached)
