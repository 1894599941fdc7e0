"""Messages whose params do not fit their method, through pytest-lsp's client to a real server: a request gets a
JSON-RPC InvalidParams error naming the wrong fields, a notification is dropped, and each is one line in the server's
log (stderr, forwarded here by pytest-lsp), never a traceback, nor an "Error in server" popup for the user."""

from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pytest_lsp import LanguageClient


def sent_as_is(client: LanguageClient, method: str, params: dict, request: bool = True):
    """Send `params` untouched (pygls' client would first make them the method's lsprotocol type, which wrong params
    cannot be); a request's answer as an awaitable."""
    protocol = client.protocol
    protocol.get_message_type = lambda method: None  # for this send only: the generic JSON-RPC message
    try:
        if not request:
            return protocol.notify(method, params)
        return asyncio.wrap_future(protocol.send_request(method, params))
    finally:
        del protocol.get_message_type


async def logged(capfd, line: str, times: int) -> str:
    """The server's log so far, once `line` is in it `times` times (pytest-lsp forwards its stderr as it comes, in
    order: whatever the server logged before is in it too)."""
    seen = ""
    while seen.count(line) < times:
        seen += capfd.readouterr().err
        await asyncio.sleep(0.05)
    return seen


@pytest.mark.asyncio
async def test_invalid_params_get_an_error_answer_and_one_log_line_each(client: LanguageClient, tmp_path, capfd):
    with pytest.raises(JsonRpcInvalidParams) as hover:
        await sent_as_is(client, "textDocument/hover", {"textDocument": 5, "position": {"line": "x"}})
    assert hover.value.message.startswith("invalid params for textDocument/hover:")
    assert "$.params.textDocument" in hover.value.message and "$.params.position.character" in hover.value.message
    with pytest.raises(JsonRpcInvalidParams) as command:  # pygls finds these later, from the command's signature
        await sent_as_is(client, "workspace/executeCommand", {"command": "dice.server.benchmark", "arguments": []})
    assert "Expected 1 arguments, got 0" in command.value.message
    sent_as_is(client, "textDocument/didOpen", {"textDocument": 3}, request=False)  # no answer is due
    # The server goes on answering, in order: what it logged for the messages above is logged before this answer
    path = tmp_path / "empty.py"
    path.write_text("")
    assert await client.text_document_hover_async(types.HoverParams(
        types.TextDocumentIdentifier(path.as_uri()), types.Position(0, 0))) is None
    with pytest.raises(JsonRpcInvalidParams):  # the last line to wait for in the log (logged by any version)
        await sent_as_is(client, "textDocument/hover", {"textDocument": {"uri": path.as_uri()}})

    log = await logged(capfd, "textDocument/hover with invalid params", 2)
    warnings = [line for line in log.splitlines() if "invalid params" in line.lower()]
    assert len(warnings) == 4 and all(" WARNING " in line for line in warnings), log
    assert "Expected 1 arguments, got 0" in warnings[1] and "textDocument/didOpen" in warnings[2]
    assert "Traceback" not in log and "Unable to" not in log, log
    assert not [m for m in client.messages if "Error in server" in m.message]
