"""Code actions that run the engine: progress, cancellation, the edit that lands, and errors shown once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcRequestCancelled
from pytest_lsp import LanguageClient

from dice_lsp import actions, status
from dice_lsp.anatomy import infill_split, parse
from dice_lsp.engine.checkpoint import BUNDLED
from dice_lsp.train.tasks import render

PROBLEM = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
           "        return torch.relu(x)\n\n\ndef get_inputs():\n    return [torch.randn(256)]\n\n\n"
           "def get_init_inputs():\n    return []\n")


async def decoding(client: LanguageClient) -> str:
    """The token of the generation's progress once the model has loaded and a block is decoded (the status goes from
    loading-model back to generating): decoding is under way. (pytest-lsp keeps $/progress without waking waiters.)"""
    while "loading-model" not in (states := [params.state for params in client.statuses]) or \
            states[::-1].index("generating") > states[::-1].index("loading-model"):
        await client.wait_for_notification(status.METHOD)
    [token] = client.progress_reports
    return token


ENDLESS = {"maxNewTokens": 100000, "steps": 4}  # decoding that runs until it is cancelled


async def open_problem(client: LanguageClient, events, tmp_path: Path, text: str = PROBLEM, **settings
                       ) -> tuple[str, Path]:
    """Open the problem `text` as relu.py and set the `dice` settings (device cpu, and `settings`); once the server
    has read both, its uri and path."""
    path = tmp_path / "relu.py"
    path.write_text(text)
    uri = await events.opened(client, path)
    await events.configure(client, device="cpu", **settings)
    return uri, path


@pytest.mark.asyncio
async def test_generate_reports_progress_and_creates_the_linked_solution(client: LanguageClient, events, tmp_path,
                                                                         tiny_model_dir):
    uri, path = await open_problem(client, events, tmp_path, model=str(tiny_model_dir),
                                   decoding={"maxNewTokens": 32})
    result = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="dice.server.generate", arguments=[uri]))
    solution = tmp_path / "relu_dice.py"
    assert result["ok"] is True and result["message"] == f"wrote {solution}"
    # The tiny random model writes no kernel: the answer says why the file cannot be used (the editor offers a retry)
    assert result["unusable"] == "; ".join(actions.unusable(parse(solution.read_text(), PROBLEM))) != ""
    # Written on disk by the server (not an unsaved buffer of the editor's), and said so: this client cannot be
    # asked to open it (it declares no window/showDocument)
    assert solution.read_text().startswith("# dice: reference = relu.py\n") and client.applied_edits == []
    assert f"dice-lsp: wrote {solution}" in [m.message for m in client.messages]
    assert path.read_text() == PROBLEM  # the problem itself is untouched
    [token] = client.progress_reports
    reports = client.progress_reports[token]
    assert reports[0].kind == "begin" and reports[-1].kind == "end"
    assert any(getattr(r, "message", "") and "tokens" in r.message for r in reports[1:-1])


@pytest.mark.asyncio
async def test_generation_can_be_cancelled_from_its_progress(client: LanguageClient, events, tmp_path,
                                                             tiny_model_dir):
    uri, _ = await open_problem(client, events, tmp_path, model=str(tiny_model_dir), decoding=ENDLESS)
    task = asyncio.ensure_future(client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="dice.server.generate", arguments=[uri])))
    token = await decoding(client)
    client.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=token))
    result = await task
    assert result == {"ok": False, "message": "cancelled", "unusable": ""}
    assert client.applied_edits == []
    assert (client.statuses[-1].state, client.statuses[-1].message) == ("idle", "generation cancelled")


@pytest.mark.asyncio
async def test_cancelling_the_request_stops_decoding_and_says_idle(client: LanguageClient, events, tmp_path,
                                                                   tiny_model_dir):
    """$/cancelRequest: the request is answered as cancelled only once decoding has stopped (its progress ends
    first), the status returns to idle, and the engine takes the next job at once instead of decoding on."""
    uri, _ = await open_problem(client, events, tmp_path, model=str(tiny_model_dir), decoding=ENDLESS)
    request = asyncio.ensure_future(client.protocol.send_request_async(
        types.WORKSPACE_EXECUTE_COMMAND, types.ExecuteCommandParams(command="dice.server.generate", arguments=[uri]),
        msg_id="generate-1"))
    token = await decoding(client)
    client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="generate-1"))
    with pytest.raises(JsonRpcRequestCancelled):
        await request
    assert client.progress_reports[token][-1].kind == "end"  # decoding had stopped before the answer
    assert (client.statuses[-1].state, client.statuses[-1].message) == ("idle", "generation cancelled")
    await events.configure(client, device="cpu", model=str(tiny_model_dir), decoding={"maxNewTokens": 16})
    result = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="dice.server.generate", arguments=[uri]))
    assert result["ok"] is True, result


@pytest.mark.asyncio
async def test_missing_model_is_one_actionable_message(client: LanguageClient, events, tmp_path):
    uri, _ = await open_problem(client, events, tmp_path, model=str(tmp_path / "no-such-model"))
    for _ in range(2):
        result = await client.workspace_execute_command_async(types.ExecuteCommandParams(
            command="dice.server.generate", arguments=[uri]))
        assert result["ok"] is False
    messages = [m.message for m in client.messages if "no-such-model" in m.message]
    assert len(messages) == 1, client.messages
    assert client.applied_edits == []


@pytest.fixture
def no_default_model(monkeypatch):
    """An install without a default model (the server started after this inherits the variable)."""
    monkeypatch.setenv("DICE_LSP_DEFAULT_MODEL", "none")


@pytest.mark.asyncio
async def test_no_model_configured_says_how_to_get_one(no_default_model, client: LanguageClient, events, tmp_path):
    uri, _ = await open_problem(client, events, tmp_path, model="")
    result = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="dice.server.generate", arguments=[uri]))
    assert result["ok"] is False and "huggingface-cli download DeadlyKitt3n/DICE-1.7B" in result["message"]
    assert any("dice.model" in m.message for m in client.messages)


@pytest.mark.asyncio
@pytest.mark.skipif(not (BUNDLED / "model.safetensors").is_file(), reason="no bundled model in this tree")
async def test_with_no_model_configured_the_bundled_model_writes_a_kernel(client: LanguageClient, events, tmp_path):
    task = next(t for t in (render("activation", "one_per_thread", s) for s in range(200)) if t.split == "heldout")
    uri, _ = await open_problem(client, events, tmp_path, task.reference, model="")
    result = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="dice.server.generate", arguments=[uri]))
    assert result["ok"] is True, result
    text = (tmp_path / "relu_dice.py").read_text()
    assert "class ModelNew(" in text and "__global__" in text and "load_inline(" in text


HELPER = '''scale_source = """
__global__ void scale_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
"""

helper = load_inline(name="helper", cpp_sources="", cuda_sources=scale_source, functions=[])

'''


def two_source_skeleton(solution: str) -> str:
    """`solution` with a real kernel's source (and its load_inline) before its own source, which becomes a TODO."""
    core = parse(solution).splits[0]
    variable = core.source.variable
    todo = f'{variable} = """\n// TODO: write the kernel and its launcher\n"""'
    return "# dice: reference = problem.py\n" + solution[:core.core.start] + HELPER + todo + solution[core.core.end:]


@pytest.mark.asyncio
@pytest.mark.skipif(not (BUNDLED / "model.safetensors").is_file(), reason="no bundled model in this tree")
async def test_infill_of_a_skeleton_fills_its_todo_source_not_the_real_kernel_before_it(client: LanguageClient,
                                                                                        events, tmp_path):
    task = next(t for t in (render("activation", "one_per_thread", s) for s in range(200)) if t.split == "heldout")
    (tmp_path / "problem.py").write_text(task.reference)
    skeleton = two_source_skeleton(task.solution)
    todo = infill_split(parse(skeleton))
    assert todo is not None and todo.source.variable != "scale_source" and len(parse(skeleton).splits) == 2
    path = tmp_path / "solution.py"
    path.write_text(skeleton)
    uri = await events.opened(client, path)
    await events.configure(client, device="cpu", model="")
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri), range=types.Range(types.Position(0, 0), types.Position(0, 0)),
        context=types.CodeActionContext(diagnostics=[])))
    assert "Infill kernel core" in [a.title for a in actions]
    result = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="dice.server.infill", arguments=[uri]))
    assert result["ok"] is True, result
    [edit] = client.applied_edits
    [change] = edit.edit.document_changes
    [replace] = change.edits
    assert change.text_document.uri == uri and change.text_document.version == 1
    lines = skeleton.splitlines()
    assert lines[replace.range.start.line].startswith(f'{todo.source.variable} = """')  # the TODO source's line
    assert lines[replace.range.end.line] == '"""' and "TODO" in "\n".join(
        lines[replace.range.start.line:replace.range.end.line + 1])
    assert "__global__" in replace.new_text and "TODO" not in replace.new_text
    assert "scale_kernel" not in replace.new_text  # the real kernel before it stays as it was
