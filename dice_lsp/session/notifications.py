"""What the session does when the editor tells it something (notifications, which answer nothing): the client is ready,
the settings changed, a file was opened, typed in, saved or closed. A file is analysed and its diagnostics published;
a save checks a solution (dice_lsp/session/checks.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

from dice_lsp.session import checks
from dice_lsp.session.state import Session
from dice_lsp.settings import read_settings
from dice_lsp.status import ServerStatus


# -- settings ----------------------------------------------------------------------------------------------------------
async def initialized(session: Session, options: Any = None) -> None:
    """The client is ready; `options` is its initializationOptions (the `dice` section, or an object holding it
    under "dice")."""
    session.given = dice_section(options, bare=True) or {}
    await reload_settings(session)
    session.editor.status(ServerStatus("idle", "ready", model=session.settings.model or None))


async def configuration_changed(session: Session, pushed: Any = None) -> None:
    """The editor's settings changed; `pushed` is what the notification carried (used when the editor cannot be
    asked). Every open file is analysed again."""
    section = dice_section(pushed, bare=False)
    if section is not None:
        session.pushed = section
    await reload_settings(session)
    await asyncio.gather(*(session.refresh(uri) for uri in list(session.documents)))


async def reload_settings(session: Session) -> None:
    """The settings as the editor answers them now (else as last pushed), over the initializationOptions; what
    cannot be used is shown once per change."""
    answered = await session.editor.configuration()
    reading = read_settings(answered if answered is not None else session.pushed, session.given)
    session.settings = reading.settings
    if reading.problems and reading.problems != session.problems:
        session.editor.show("warning", "some settings were not used: " + "; ".join(reading.problems))
    session.problems = reading.problems


def dice_section(value: Any, bare: bool) -> dict[str, Any] | None:
    """The `dice` settings in what a client sent: value["dice"]; with `bare`, `value` itself when it has no "dice"
    key (initializationOptions may be the section itself)."""
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("dice"), dict):
        return value["dice"]
    return value if bare and "dice" not in value else None


# -- documents ---------------------------------------------------------------------------------------------------------
def open(session: Session, uri: str, text: str, version: int) -> None:  # noqa: A001  (the LSP notification's name)
    doc = session.document(uri)
    doc.text, doc.version = text, version
    session.spawn(_opened(session, uri))


async def _opened(session: Session, uri: str) -> None:
    analysis = await session.refresh(uri)
    settings = session.settings
    if analysis is not None and analysis.anatomy.cuda_sources and settings.run_on_save and settings.trusted_workspace:
        session.check_runner.prepare(settings)  # a save is likely next: its check finds the shared build parts ready


def change(session: Session, uri: str, text: str, version: int) -> None:
    """The file's new text: analysed once typing pauses for the session's `debounce_s`."""
    doc = session.document(uri)
    doc.text, doc.version = text, version
    if doc.debounce is not None:
        doc.debounce.cancel()
    doc.debounce = asyncio.get_running_loop().call_later(session.debounce_s,
                                                          lambda: session.spawn(session.refresh(uri)))


def save(session: Session, uri: str) -> None:
    session.spawn(_saved(session, uri))


async def _saved(session: Session, uri: str) -> None:
    analysis = await session.refresh(uri)
    if session.settings.run_on_save and analysis is not None and analysis.anatomy.model_new is not None:
        await checks.check(session, uri, "saved")


def close(session: Session, uri: str) -> None:
    session.check_runner.cancel(uri)
    doc = session.documents.pop(uri, None)
    if doc is not None:
        if doc.debounce is not None:
            doc.debounce.cancel()
        if doc.generating is not None:
            doc.generating.set()
    session.editor.clear(uri)
