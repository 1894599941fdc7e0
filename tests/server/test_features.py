"""Hover, code lens, a check's progress, and settings that change without a restart."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

FILES = Path(__file__).parent.parent / "anatomy" / "files"


@pytest.mark.asyncio
async def test_hover_on_a_kernel_names_it_and_its_kind(client: LanguageClient, events, tmp_path):
    path = tmp_path / "matmul.py"
    path.write_text((FILES / "honest_matmul_odd_strings.py").read_text())
    uri = await events.opened(client, path)
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
async def test_code_lens_above_model_new_offers_benchmark(client: LanguageClient, events, tmp_path):
    path = tmp_path / "matmul.py"
    path.write_text((FILES / "honest_matmul_odd_strings.py").read_text())
    uri = await events.opened(client, path)
    lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(uri)))
    assert [lens.command.title for lens in lenses] == ["Benchmark"]
    assert lenses[0].command.command == "dice.server.benchmark"
    assert path.read_text().splitlines()[lenses[0].range.start.line].startswith("class ModelNew")


@pytest.mark.asyncio
async def test_code_lens_of_a_file_not_yet_opened_is_read_from_the_disk(client: LanguageClient, tmp_path):
    """An editor may ask for a file's lenses before it says it opened it, and asks again only once the text changes
    (VS Code showed no Benchmark lens for the rest of a session, now and then): the answer is the file on disk's."""
    path = tmp_path / "matmul.py"
    path.write_text((FILES / "honest_matmul_odd_strings.py").read_text())
    lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(
        path.as_uri())))
    assert [lens.command.title for lens in lenses] == ["Benchmark"]
    assert path.read_text().splitlines()[lenses[0].range.start.line].startswith("class ModelNew")
    missing = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(
        (tmp_path / "gone.py").as_uri())))
    assert not missing


@pytest.mark.asyncio
async def test_settings_change_applies_without_restart_and_cuda_home_chooses_the_toolkit(client: LanguageClient,
                                                                                          events, tmp_path):
    """Trust and dice.cudaHome reach the running server: a cudaHome without nvcc stops a CUDA check even where nvcc
    is on PATH (the build would use that toolkit and no other), and pointing it at a toolkit starts the check."""
    toolkit = next((home for home in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda")
                    if home and Path(home, "bin", "nvcc").is_file()), None)
    if toolkit is None:
        pytest.skip("no CUDA toolkit here to point dice.cudaHome at")
    path = tmp_path / "solution.py"
    path.write_text((FILES / "honest_add_with_model.py").read_text())
    uri = await events.opened(client, path)

    async def benchmark() -> str:
        result = await client.workspace_execute_command_async(types.ExecuteCommandParams(
            command="dice.server.benchmark", arguments=[uri]))
        return result["message"]

    assert "not trusted" in await benchmark()
    # The user trusts the workspace and points cudaHome at a place with no nvcc: the next request sees both.
    await events.configure(client, trustedWorkspace=True, cudaHome=str(tmp_path / "no-cuda"))
    assert await benchmark() == "no nvcc"
    assert [m.message for m in client.messages if "nvcc" in m.message] == ["dice-lsp: no nvcc found in dice.cudaHome"]
    # Then at a toolkit (by another path, so the setting is all that changed where nvcc is found): the check starts.
    (tmp_path / "toolkit").symlink_to(toolkit)
    await events.configure(client, trustedWorkspace=True, cudaHome=str(tmp_path / "toolkit"))
    assert await benchmark() == "checking"
    await events.status_reached(client, uri, "checking")
    client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri)))  # cancels


@pytest.mark.asyncio
async def test_a_check_shows_work_done_progress_that_ends_with_its_result(client: LanguageClient, events, tmp_path):
    """The check's progress is standard $/progress (any client shows it), titled with the file, ended with the result
    when the check's report lands."""
    (tmp_path / "relu.py").write_text((Path(__file__).parent / "files" / "relu.py").read_text())
    path = tmp_path / "broken_dice.py"
    path.write_text("# dice: reference = relu.py\nimport torch\nimport torch.nn as nn\n\n"
                    "raise RuntimeError('this solution fails at import')\n\n\nclass ModelNew(nn.Module):\n"
                    "    def forward(self, x):\n        return torch.relu(x)\n")
    uri = await events.opened(client, path)
    await events.configure(client, trustedWorkspace=True, device="cpu", baseline="eager")
    result = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="dice.server.benchmark", arguments=[uri]))
    assert result == {"started": True, "message": "checking"}
    await events.status_reached(client, uri, "idle")
    [reports] = client.progress_reports.values()
    assert reports[0].kind == "begin" and reports[0].title == "Checking broken_dice.py" and reports[0].cancellable
    assert "building" in [r.message for r in reports if r.kind == "report"]  # the harness's stage, as it began
    assert reports[-1].kind == "end" and reports[-1].message.startswith("crashed")
    assert "this solution fails at import" in reports[-1].message
