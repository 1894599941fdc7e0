"""The `dice/status` message: what the server sends, and that the VS Code client's typed interface matches it."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

from dice_lsp.status import METHOD, NOTIFICATIONS, STATES, ServerStatus

CLIENT = Path(__file__).parents[2] / "vscode-extension" / "src" / "status.ts"


def test_unchanged_fields_are_left_out_and_none_is_sent_as_null():
    assert ServerStatus("checking", "saved", uri="file:///a.py").params() == \
        {"state": "checking", "message": "saved", "uri": "file:///a.py"}
    assert ServerStatus("idle", uri="file:///a.py", speedup=None, model=None).params() == \
        {"state": "idle", "message": "", "uri": "file:///a.py", "model": None, "speedup": None}
    assert NOTIFICATIONS == {METHOD: ServerStatus}


def test_an_unknown_state_is_refused():
    with pytest.raises(ValueError, match="unknown server state"):
        ServerStatus("busy")


def test_the_client_reads_the_same_message():
    source = CLIENT.read_text()
    assert f'STATUS_NOTIFICATION = "{METHOD}"' in source
    union = re.search(r"export type ServerState =([^;]+);", source).group(1)
    assert set(re.findall(r'"([^"]+)"', union)) == set(STATES)
    body = re.search(r"export interface StatusParams \{(.*?)\n\}", source, re.DOTALL).group(1)
    declared = dict(re.findall(r"^\s+(\w+)\??: ([^;]+);", body, re.MULTILINE))
    assert set(declared) == {f.name for f in fields(ServerStatus)}
    assert declared["state"] == "ServerState"
