"""On a GPU: saving a CUDA solution puts its speedups on class ModelNew and each kernel's time share on its line."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

HARNESS_FILES = Path(__file__).parent.parent / "harness" / "files"
pytestmark = [pytest.mark.gpu, pytest.mark.slow]


@pytest.mark.asyncio
async def test_saved_cuda_solution_shows_speedups_and_kernel_shares(client: LanguageClient, tmp_path):
    client.set_configuration({"trustedWorkspace": True, "device": "auto", "baseline": "both"}, section="dice")
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    (tmp_path / "add.py").write_text((HARNESS_FILES / "add_reference.py").read_text())
    text = "# dice: reference = add.py\n" + (HARNESS_FILES / "cuda_solution.py").read_text()
    path = tmp_path / "add_dice.py"
    path.write_text(text)
    uri = path.as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
        uri=uri, language_id="python", version=1, text=text)))
    await asyncio.sleep(0.5)
    client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(uri)))

    async def settled():
        while True:
            current = client.diagnostics.get(uri, [])
            if any(d.code in ("correct", "mismatch", "crashed", "compile-error", "timed-out") for d in current):
                return current
            await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)

    diagnostics = await asyncio.wait_for(settled(), 540)
    lines = text.splitlines()
    [result] = [d for d in diagnostics if d.code == "correct"]
    assert "vs eager" in result.message and "vs torch.compile" in result.message
    assert lines[result.range.start.line].startswith("class ModelNew")
    [share] = [d for d in diagnostics if d.code == "kernel-time"]
    assert "add_kernel" in lines[share.range.start.line] and "of forward GPU time" in share.message
    [unused] = [d for d in diagnostics if d.code == "kernel-not-launched"]
    assert "unused_kernel" in lines[unused.range.start.line]
    print("\n" + "\n".join(f"{d.code}: {d.message}" for d in diagnostics))
