"""A real dice-lsp server process driven by pytest-lsp's client over stdio."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

FILES = Path(__file__).parent.parent / "anatomy" / "files"


def settings(**overrides) -> dict:
    base = {"trustedWorkspace": False, "runOnSave": True, "timingTrials": 20, "correctnessTrials": 5}
    base.update(overrides)
    return base


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "dice_lsp"]))
async def client(lsp_client: LanguageClient, tmp_path):
    lsp_client.set_configuration(settings(), section="dice")
    lsp_client.applied_edits = []

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
