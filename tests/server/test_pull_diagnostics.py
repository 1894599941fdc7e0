"""Pulled diagnostics (LSP 3.17) for a client that pulls and can be asked to pull again, pushed ones for any other,
never both; related locations only for a client that says it shows them."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import converters, types
from pytest_lsp import ClientServerConfig, LanguageClient

from dice_lsp import convert, status
from dice_lsp.anatomy import parse

from .conftest import settings

FILES = Path(__file__).parent.parent / "anatomy" / "files"
GUARD_S = 60  # only against a hang: every wait is on a message the server sends
SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "dice_lsp"])
PULLS = types.DiagnosticClientCapabilities(related_information=True)
JSON = converters.get_converter()  # diagnostics as the wire carries them (the client reads lists back as tuples)


async def started(client: LanguageClient, tmp_path, document: types.TextDocumentClientCapabilities,
                  refresh: bool) -> None:
    """Initialize `client` with these diagnostic capabilities; its InitializeResult is `client.answer`, and each
    workspace/diagnostic/refresh it is asked lands in `client.refreshes`."""
    client.set_configuration(settings(), section="dice")
    client.refreshes = asyncio.Queue()
    client.feature(status.METHOD)(lambda params: None)
    del client.protocol.fm.features[types.WORKSPACE_DIAGNOSTIC_REFRESH]  # pytest-lsp's, which only counts them

    @client.feature(types.WORKSPACE_DIAGNOSTIC_REFRESH)
    def refreshed(params) -> None:
        client.refreshes.put_nowait(True)

    client.answer = await client.initialize_session(types.InitializeParams(
        capabilities=types.ClientCapabilities(
            text_document=document,
            workspace=types.WorkspaceClientCapabilities(
                configuration=True, did_change_configuration=types.DidChangeConfigurationClientCapabilities(),
                diagnostics=types.DiagnosticWorkspaceClientCapabilities(refresh_support=refresh))),
        root_uri=tmp_path.as_uri()))


@pytest_lsp.fixture(config=SERVER)
async def puller(lsp_client: LanguageClient, tmp_path):
    await started(lsp_client, tmp_path, types.TextDocumentClientCapabilities(diagnostic=PULLS), refresh=True)
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=SERVER)
async def cannot_be_asked(lsp_client: LanguageClient, tmp_path):
    """A client that pulls but cannot be asked to pull again (no refreshSupport)."""
    await started(lsp_client, tmp_path, types.TextDocumentClientCapabilities(diagnostic=PULLS), refresh=False)
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=SERVER)
async def pushed_with_related(lsp_client: LanguageClient, tmp_path):
    await started(lsp_client, tmp_path, types.TextDocumentClientCapabilities(
        publish_diagnostics=types.PublishDiagnosticsClientCapabilities(related_information=True)), refresh=False)
    yield
    await lsp_client.shutdown_session()


def open_file(client: LanguageClient, path: Path, text: str) -> str:
    path.write_text(text)
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
        uri=path.as_uri(), language_id="python", version=1, text=text)))
    return path.as_uri()


async def refreshed(client: LanguageClient) -> None:
    """Until the server asks the client to pull again."""
    await asyncio.wait_for(client.refreshes.get(), GUARD_S)


async def pushed(client: LanguageClient, uri: str) -> list[types.Diagnostic]:
    async def wait():
        while uri not in client.diagnostics:
            await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        return client.diagnostics[uri]
    return await asyncio.wait_for(wait(), GUARD_S)


async def pull(client: LanguageClient, uri: str, previous: str | None = None):
    return await client.text_document_diagnostic_async(types.DocumentDiagnosticParams(
        text_document=types.TextDocumentIdentifier(uri), previous_result_id=previous))


@pytest.mark.asyncio
async def test_a_client_that_pulls_is_asked_to_pull_again_after_each_change_and_never_pushed_to(puller, tmp_path):
    provider = puller.answer.capabilities.diagnostic_provider
    assert provider.identifier == "dice" and not provider.inter_file_dependencies and not provider.workspace_diagnostics
    text = (FILES / "honest_add_with_model.py").read_text()
    uri = open_file(puller, tmp_path / "solution.py", text)
    await refreshed(puller)  # the file is analysed
    honest = await pull(puller, uri)
    assert honest.kind == "full" and honest.result_id
    assert [d for d in honest.items if d.severity == types.DiagnosticSeverity.Warning] == []
    assert (await pull(puller, uri, honest.result_id)).kind == "unchanged"
    # forward stops calling the kernel: once analysed, the client is asked to pull, and gets the new set
    new = text.replace("return self.elementwise_add.elementwise_add_cuda(a, b)", "return torch.add(a, b)")
    puller.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=new)]))
    await refreshed(puller)
    changed = await pull(puller, uri, honest.result_id)
    assert changed.kind == "full" and changed.result_id != honest.result_id
    # the very set a push would carry, related locations included (the client shows them)
    expected = convert.document_diagnostics(parse(new), None, None, "utf-16", convert.Places(uri))
    assert JSON.unstructure(list(changed.items)) == JSON.unstructure(expected)
    [binding] = [d for d in changed.items if d.code == "binding-not-called"]
    [place] = binding.related_information
    assert "torch::Tensor elementwise_add_cuda(" in new.splitlines()[place.location.range.start.line]
    # A settings change analyses every open file again: the client is asked to pull once more
    puller.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    await refreshed(puller)
    assert (await pull(puller, uri, changed.result_id)).kind == "unchanged"
    puller.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri)))
    other = open_file(puller, tmp_path / "other.py", text)
    await refreshed(puller)  # messages arrive in order: a push about either file would have come before this
    assert (await pull(puller, other)).kind == "full"
    assert puller.diagnostics == {}  # nothing was ever pushed


@pytest.mark.asyncio
async def test_a_client_that_cannot_be_asked_to_pull_again_is_pushed_to_and_not_offered_pulls(cannot_be_asked,
                                                                                              tmp_path):
    assert cannot_be_asked.answer.capabilities.diagnostic_provider is None
    uri = open_file(cannot_be_asked, tmp_path / "solution.py", (FILES / "deceptive_never_bound.py").read_text())
    assert "kernel-not-bound" in {d.code for d in await pushed(cannot_be_asked, uri)}
    assert cannot_be_asked.refreshes.empty()


@pytest.mark.asyncio
async def test_related_locations_go_to_a_client_that_shows_them_and_to_no_other(pushed_with_related, client, tmp_path):
    assert pushed_with_related.answer.capabilities.diagnostic_provider is None
    text = (FILES / "deceptive_fallbacks.py").read_text()
    lines = text.splitlines()
    uri = open_file(pushed_with_related, tmp_path / "shows.py", text)
    fallbacks = [d for d in await pushed(pushed_with_related, uri) if d.code == "exception-fallback"]
    assert len(fallbacks) == 2
    for diagnostic in fallbacks:
        [place] = diagnostic.related_information
        assert place.location.uri == uri and lines[place.location.range.start.line].strip() == "except Exception:"
        assert place.location.range.start.line > diagnostic.range.start.line
    # the fixture's client declares no relatedInformation: the same findings, without their second places
    plain = open_file(client, tmp_path / "plain.py", text)
    diagnostics = await pushed(client, plain)
    assert [d.code for d in diagnostics if d.code == "exception-fallback"] == ["exception-fallback"] * 2
    assert all(d.related_information is None for d in diagnostics)


@pytest.mark.asyncio
async def test_a_related_location_in_the_linked_problem_points_into_that_file(pushed_with_related, tmp_path):
    problem = tmp_path / "problem.py"
    problem.write_text("import torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self, scale):\n"
                       "        super().__init__()\n\n    def forward(self, x, y):\n        return x + y\n")
    solution = "# dice: reference = problem.py\n" + (FILES / "deceptive_bound_not_called.py").read_text()
    uri = open_file(pushed_with_related, tmp_path / "solution.py", solution)
    diagnostics = await pushed(pushed_with_related, uri)
    mismatches = {d.message.split(" takes")[0]: d for d in diagnostics if d.code == "signature-mismatch"}
    lines = problem.read_text().splitlines()
    for method, message in (("forward", "Model's forward"), ("__init__", "Model's __init__")):
        [place] = mismatches[method].related_information
        assert place.location.uri == problem.as_uri() and place.message == message
        assert lines[place.location.range.start.line].strip().startswith(f"def {method}(self, ")
