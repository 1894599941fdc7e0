"""Hover, code lens and settings that change without a restart."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

FILES = Path(__file__).parent.parent / "anatomy" / "files"


async def opened(client: LanguageClient, path: Path) -> str:
    uri = path.as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
        uri=uri, language_id="python", version=1, text=path.read_text())))
    for _ in range(200):
        if uri in client.diagnostics:
            return uri
        await asyncio.sleep(0.05)
    raise AssertionError("no diagnostics published on open")


@pytest.mark.asyncio
async def test_hover_on_a_kernel_names_it_and_its_kind(client: LanguageClient, tmp_path):
    path = tmp_path / "matmul.py"
    path.write_text((FILES / "honest_matmul_odd_strings.py").read_text())
    uri = await opened(client, path)
    lines = path.read_text().splitlines()
    line = next(i for i, text in enumerate(lines) if "void tiled_matmul_kernel(" in text)
    column = lines[line].index("tiled_matmul_kernel") + 3
    hover = await client.text_document_hover_async(types.HoverParams(
        types.TextDocumentIdentifier(uri), types.Position(line, column)))
    assert "**tiled_matmul_kernel** (__global__ kernel)" in hover.contents.value
    nothing = await client.text_document_hover_async(types.HoverParams(
        types.TextDocumentIdentifier(uri), types.Position(0, 0)))
    assert nothing is None


@pytest.mark.asyncio
async def test_code_lens_above_model_new_offers_benchmark(client: LanguageClient, tmp_path):
    path = tmp_path / "matmul.py"
    path.write_text((FILES / "honest_matmul_odd_strings.py").read_text())
    uri = await opened(client, path)
    lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(uri)))
    assert [lens.command.title for lens in lenses] == ["Benchmark"]
    assert lenses[0].command.command == "dice.server.benchmark"
    assert path.read_text().splitlines()[lenses[0].range.start.line].startswith("class ModelNew")


@pytest.mark.asyncio
async def test_settings_change_applies_without_restart(client: LanguageClient, tmp_path):
    path = tmp_path / "solution.py"
    path.write_text((FILES / "honest_add_with_model.py").read_text())
    uri = await opened(client, path)
    result = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="dice.server.benchmark", arguments=[uri]))
    assert "not trusted" in result["message"]
    # The user trusts the workspace and points cudaHome at a place with no nvcc: the next request sees both.
    client.set_configuration({"trustedWorkspace": True, "cudaHome": str(tmp_path / "no-cuda")}, section="dice")
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    for _ in range(100):
        result = await client.workspace_execute_command_async(types.ExecuteCommandParams(
            command="dice.server.benchmark", arguments=[uri]))
        if "not trusted" not in result["message"]:
            break
        await asyncio.sleep(0.05)
    assert "not trusted" not in result["message"]
