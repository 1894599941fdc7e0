"""On open and change: anatomy diagnostics at once, debounced while typing."""

from __future__ import annotations

import ast
import asyncio

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from pathlib import Path

FILES = Path(__file__).parent.parent / "anatomy" / "files"


def open_file(client: LanguageClient, path, text: str | None = None, version: int = 1) -> str:
    uri = path.as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
        uri=uri, language_id="python", version=version, text=text if text is not None else path.read_text())))
    return uri


async def diagnostics_for(client: LanguageClient, uri: str, until=None, timeout: float = 20):
    """The file's diagnostics once they are published (and, with `until`, once `until(diagnostics)` holds)."""
    async def wait():
        while True:
            current = client.diagnostics.get(uri)
            if current is not None and (until is None or until(current)):
                return current
            await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    return await asyncio.wait_for(wait(), timeout)


@pytest.mark.asyncio
async def test_deceptive_file_gets_findings_on_the_right_lines(client: LanguageClient, tmp_path):
    path = tmp_path / "solution.py"
    path.write_text((FILES / "deceptive_never_bound.py").read_text())
    uri = open_file(client, path)
    diagnostics = await diagnostics_for(client, uri)
    by_code = {d.code: d for d in diagnostics}
    assert by_code["kernel-not-bound"].severity == types.DiagnosticSeverity.Warning
    text = path.read_text().splitlines()
    assert "load_inline" in text[by_code["kernel-not-bound"].range.start.line]
    assert "F.softmax" in text[by_code["torch-fallback"].range.start.line]
    assert all(d.source == "dice" for d in diagnostics)


@pytest.mark.asyncio
async def test_solution_without_reference_and_problem_without_inputs(client: LanguageClient, tmp_path):
    solution = tmp_path / "lonely.py"
    solution.write_text((FILES / "honest_add.py").read_text())
    uri = open_file(client, solution)
    codes = {d.code for d in await diagnostics_for(client, uri)}
    assert "no-reference" in codes
    problem = tmp_path / "problem.py"
    problem.write_text("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n"
                       "    def forward(self, x):\n        return x * 2\n")
    uri = open_file(client, problem)
    [missing] = [d for d in await diagnostics_for(client, uri) if d.code == "missing-get-inputs"]
    assert missing.range.start.line == 3


@pytest.mark.asyncio
async def test_typing_updates_diagnostics_after_a_pause(client: LanguageClient, tmp_path):
    path = tmp_path / "solution.py"
    text = (FILES / "honest_add_with_model.py").read_text()
    path.write_text(text)
    uri = open_file(client, path)
    assert [d for d in await diagnostics_for(client, uri) if d.severity == types.DiagnosticSeverity.Warning] == []
    # Three quick edits: forward stops calling the kernel. Only the settled text is analysed.
    old = "return self.elementwise_add.elementwise_add_cuda(a, b)"
    line = text[: text.index(old)].count("\n")
    column = len(text.splitlines()[line]) - len(old)
    for version, new in enumerate(["return torch.add(a, b)  ", "return torch.add(a, b) ", "return torch.add(a, b)"],
                                  start=2):
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangePartial(
                range=types.Range(types.Position(line, column), types.Position(line, column + len(old))),
                text=new)]))
        old = new
    diagnostics = await diagnostics_for(client, uri, until=lambda ds: any(d.code == "torch-fallback" for d in ds))
    assert {"binding-not-called", "torch-fallback"} <= {d.code for d in diagnostics}
    [fallback] = [d for d in diagnostics if d.code == "torch-fallback"]
    assert fallback.range.start == types.Position(line, column + len("return "))


def command_of(action) -> tuple[str, list]:
    """(command id, arguments) of a code action as the client received it.

    lsprotocol's client-side converter reads any code action that carries a command as a bare Command and turns the
    nested command object into its repr; the server sends a proper CodeAction (Neovim's test reads it raw).
    """
    if isinstance(action, types.CodeAction):
        return action.command.command, action.command.arguments
    nested = ast.literal_eval(action.command)
    return nested["command"], nested["arguments"]


@pytest.mark.asyncio
async def test_code_actions_offered_where_they_apply(client: LanguageClient, tmp_path):
    problem = tmp_path / "problem.py"
    problem.write_text((FILES / "honest_matmul_odd_strings.py").read_text().split("class ModelNew")[0].replace(
        "matmul_ext = load_inline(", "_unused = dict(") + "\n\nclass Model:\n    def forward(self, A, B):\n"
        "        return A @ B\n\ndef get_inputs():\n    return []\n")
    uri = open_file(client, problem)
    await diagnostics_for(client, uri)
    result = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri), range=types.Range(types.Position(0, 0), types.Position(0, 0)),
        context=types.CodeActionContext(diagnostics=[])))
    assert [a.title for a in result] == ["Generate CUDA kernel"]
    assert command_of(result[0]) == ("dice.server.generate", [uri])
    skeleton = tmp_path / "skeleton.py"
    text = (FILES / "honest_add_with_model.py").read_text()
    start = text.index('elementwise_add_source = """')
    end = text.index('"""', start + 30) + 3
    skeleton.write_text(text[:start] + 'elementwise_add_source = """\n// TODO: write the kernel\n"""' + text[end:])
    uri = open_file(client, skeleton)
    await diagnostics_for(client, uri)
    line = skeleton.read_text().splitlines().index("class ModelNew(nn.Module):")
    result = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri),
        range=types.Range(types.Position(line, 3), types.Position(line, 3)),
        context=types.CodeActionContext(diagnostics=[])))
    assert [a.title for a in result] == ["Infill kernel core", "Benchmark now"]


@pytest.mark.asyncio
async def test_untrusted_workspace_builds_nothing_says_so_once_on_save_and_on_every_benchmark(client: LanguageClient,
                                                                                             tmp_path):
    path = tmp_path / "solution.py"
    path.write_text((FILES / "honest_add_with_model.py").read_text())
    uri = open_file(client, path)
    await diagnostics_for(client, uri)
    for _ in range(2):
        client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(uri)))
    for clicks in (1, 2):
        result = await client.workspace_execute_command_async(types.ExecuteCommandParams(
            command="dice.server.benchmark", arguments=[uri]))
        assert result["started"] is False and "not trusted" in result["message"]
        # The saves said it once; each click on Benchmark now explains itself again (messages arrive in order, the
        # saves' before the command's answer)
        assert len([m.message for m in client.messages if "not trusted" in m.message]) == 1 + clicks


@pytest.mark.asyncio
async def test_a_finding_with_a_mechanical_fix_offers_it_as_a_quick_fix_with_its_documentation(client: LanguageClient,
                                                                                              tmp_path):
    path = tmp_path / "fallbacks.py"
    text = (FILES / "deceptive_fallbacks.py").read_text()
    path.write_text(text)
    uri = open_file(client, path)
    diagnostics = await diagnostics_for(client, uri)
    line = text.splitlines().index("        try:")
    [fallback] = [d for d in diagnostics if d.code == "exception-fallback" and d.range.start.line == line]
    assert fallback.code_description.href.endswith("README.md#finding-exception-fallback")
    result = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri), range=fallback.range,
        context=types.CodeActionContext(diagnostics=[fallback])))
    # (the client's converter reads the command-carrying actions as bare Commands: see command_of)
    [fix] = [a for a in result if isinstance(a, types.CodeAction) and a.kind == types.CodeActionKind.QuickFix]
    assert fix.title == "Remove the try/except: let a failing kernel fail" and fix.is_preferred
    assert [(d.code, d.range) for d in fix.diagnostics] == [("exception-fallback", fallback.range)]
    [change] = fix.edit.document_changes
    [edit] = change.edits
    assert change.text_document.version == 1 and edit.new_text == "        return self.ext.gelu_cuda(x)"
    lines = text.splitlines()
    assert lines[edit.range.start.line] == "        try:" and lines[edit.range.end.line].strip() == \
        "return super().forward(x)"
