"""pygls' protocol, changed where its behaviour would hurt a user: a message whose params do not fit its method is
answered with InvalidParams instead of silence, and $/cancelRequest of a running command stops what the command
started. Every private pygls name dice-lsp touches (`_converter`, `_handle_cancel_notification`,
`_send_handler_result`, `_send_response`, `_request_futures`) is used here and nowhere else, so a pygls upgrade is
checked against this one file.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from typing import Any, Awaitable, TypeVar

import cattrs
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams, JsonRpcRequestCancelled
from pygls.protocol import LanguageServerProtocol, lsp_method

from dice_lsp.lsp.capabilities import pulls_diagnostics

log = logging.getLogger("dice_lsp")
T = TypeVar("T")


@dataclass(frozen=True)
class Unreadable:
    """A message whose params do not fit its method: a request is answered with InvalidParams, a notification is
    dropped (JSON-RPC answers none); neither goes further."""

    id: int | str | None
    method: str
    why: str


class DiceProtocol(LanguageServerProtocol):
    """pygls' protocol, except that a message whose params do not fit its method is one warning in the log, and a
    request of that kind gets an InvalidParams error saying which field is wrong. (pygls logs a traceback of every
    nested cattrs error for it, answers nothing, and shows the user "Error in server"; the client would wait for the
    answer for ever.) Errors that pygls raises for a request's params later on (a command's arguments) are answered
    the same way."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands: dict[int | str, asyncio.Task] = {}  # running commands by request id, for $/cancelRequest

    # -- commands that a cancel really stops -------------------------------------------------------------------------
    async def command(self, work: Awaitable[T]) -> T:
        """`work`, run as the answer to the request being handled: while it runs, a $/cancelRequest of that request
        cancels it, and the request is answered as cancelled once `work` has stopped what it started."""
        request = self.msg_id
        self.commands[request] = asyncio.current_task()
        try:
            return await work
        except asyncio.CancelledError:
            raise JsonRpcRequestCancelled(f"request {request} was cancelled") from None
        finally:
            self.commands.pop(request, None)

    async def cancel_commands(self) -> None:
        """Cancel every running command and wait until each has answered (the server is stopping)."""
        commands = list(self.commands.values())
        for task in commands:
            task.cancel()
        await asyncio.gather(*commands, return_exceptions=True)

    def _handle_cancel_notification(self, msg_id: int | str) -> None:
        """$/cancelRequest of a running command cancels its task, so what it started stops too (pygls cancels only
        the future of its own executeCommand handler: the answer went out at once while decoding went on); the
        command then answers as cancelled."""
        task = self.commands.pop(msg_id, None)
        if task is None:
            super()._handle_cancel_notification(msg_id)
        else:
            task.cancel()

    # -- initialize: diagnostics offered for pulling only to a client that pulls them --------------------------------
    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams):
        """pygls' initialize, except that only a client that pulls diagnostics (pulls_diagnostics) is offered them:
        any other gets them pushed, and one that could pull but not be asked to pull again would otherwise pull and
        be pushed to, and show each diagnostic twice."""
        result = yield from super().lsp_initialize(params)
        if not pulls_diagnostics(params.capabilities):
            result.capabilities.diagnostic_provider = None
        return result

    # -- params that do not fit: one warning, and an answer ----------------------------------------------------------
    def structure_message(self, data: dict[str, Any]):
        method = data.get("method")
        if "jsonrpc" not in data or "error" in data or not isinstance(method, str) or \
                self.get_message_type(method) is None:
            return super().structure_message(data)  # responses, and methods lsprotocol has no type for
        try:  # pygls' own structuring of a typed request or notification, without its traceback in the log
            return self._converter.structure(data, self.get_message_type(method))
        except Exception as error:  # noqa: BLE001  (any params that do not structure are the client's mistake)
            why = "; ".join(_json_path(line) for line in cattrs.transform_error(error)) \
                if isinstance(error, cattrs.BaseValidationError) else f"{type(error).__name__}: {error}"
            return Unreadable(data.get("id"), method, why)

    def handle_message(self, message) -> None:
        if isinstance(message, Unreadable):
            if message.id is None:
                log.warning("%s with invalid params, ignored: %s", message.method, message.why)
                return
            log.warning("%s with invalid params: %s", message.method, message.why)
            self._send_response(message.id, error=JsonRpcInvalidParams(
                f"invalid params for {message.method}: {message.why}").to_response_error())
            return
        super().handle_message(message)

    def _send_handler_result(self, future, *, msg_id: int | str) -> None:
        error = None if future.cancelled() else future.exception()
        # A cancel or the client's own wrong params is an answer, not an error worth a traceback in the log
        if isinstance(error, (JsonRpcRequestCancelled, JsonRpcInvalidParams)):
            self._request_futures.pop(msg_id, None)
            if isinstance(error, JsonRpcInvalidParams):
                log.warning("request %s: %s", msg_id, error.message)
            self._send_response(msg_id, error=error.to_response_error())
            return
        super()._send_handler_result(future, msg_id=msg_id)


def _json_path(line: str) -> str:
    """cattrs names fields as lsprotocol's classes do (text_document); the client wrote them in JSON (textDocument)."""
    what, at, path = line.rpartition(" @ ")
    return f"{what}{at}{re.sub(r'_([a-z])', lambda m: m.group(1).upper(), path)}" if at else line
