"""The server's `dice/status` notification to the editor, as one typed message (the VS Code side reads it as
`StatusParams` in vscode-extension/src/status.ts; tests/server/test_status.py keeps the two in step)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal, get_args

METHOD = "dice/status"

# What the server is doing. The client adds states only it can see ("starting", "stopped").
State = Literal["idle", "loading-model", "generating", "checking", "error"]
STATES: tuple[str, ...] = get_args(State)


class _Unchanged:
    """A field the client keeps as it was: left out of the message (unlike None, which is sent as null)."""

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED: Any = _Unchanged()


@dataclass(frozen=True)
class ServerStatus:
    """One `dice/status` notification."""

    state: State
    message: str = ""
    uri: str | None = None  # the document `speedup` belongs to
    model: str | None = UNCHANGED  # the loaded model's name; None: no model loaded
    speedup: float | None = UNCHANGED  # the last measured speedup of `uri`; None: its last check measured none

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"unknown server state {self.state!r}; one of {', '.join(STATES)}")

    def params(self) -> dict[str, Any]:
        """The notification's params as JSON: fields left UNCHANGED (and a missing uri) are not sent."""
        out = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if value is UNCHANGED or (item.name == "uri" and value is None):
                continue
            out[item.name] = value
        return out


# Every notification this boundary carries, by method: the one place a reader finds the server -> client messages.
NOTIFICATIONS: dict[str, type] = {METHOD: ServerStatus}
