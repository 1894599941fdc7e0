"""What the session needs from the editor, and what it answers: the `Editor` protocol that dice_lsp/lsp/editor.py
implements over LSP and tests implement with a recording fake, and the plain values that cross it.

No pygls here either: the session speaks to an editor, never to a protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from dice_lsp import actions
from dice_lsp.anatomy import Anatomy, Pairing
from dice_lsp.status import ServerStatus

if TYPE_CHECKING:  # only for annotations: the harness's package loads its batch machinery on import
    from dice_lsp.harness.report import Report

Severity = Literal["error", "warning", "info"]


class ProgressReport(Protocol):
    """One long job's progress in the editor."""

    @property
    def cancelled(self) -> bool: ...

    def report(self, message: str) -> None: ...

    def end(self, message: str) -> None: ...


@dataclass(frozen=True)
class Applied:
    applied: bool
    reason: str = ""  # why the editor did not apply it


class Editor(Protocol):
    def publish(self, snapshot: Snapshot) -> None:
        """Show the file's diagnostics: its anatomy's findings, and its last check when it was of this text (sent, or
        the editor asked to fetch them again from the session's snapshot)."""

    def clear(self, uri: str) -> None:
        """Remove the file's diagnostics (it was closed)."""

    def show(self, severity: Severity, message: str) -> None:
        """A message the user sees (a notification)."""

    def status(self, status: ServerStatus) -> None: ...

    def refresh_views(self) -> None:
        """Ask the editor to fetch code lenses and inlay hints again: a check's result changed them."""

    async def configuration(self) -> Any:
        """The `dice` settings section as the editor answers `workspace/configuration`; None when it cannot."""

    async def progress(self, title: str) -> ProgressReport:
        """Progress shown for a long job, which the user may cancel; one that reports nowhere when the editor shows
        none."""

    async def apply(self, uri: str, version: int, edit: actions.Replace, label: str) -> Applied:
        """Apply `edit` to the file `uri` at `version` (the user confirms it first where the editor can ask)."""

    async def show_document(self, uri: str) -> bool:
        """Open the file in the editor; whether it did."""


class NoProgress:
    """Progress for an editor that shows none: reports nowhere, never cancelled."""

    cancelled = False

    def report(self, message: str) -> None:
        pass

    def end(self, message: str) -> None:
        pass


@dataclass(frozen=True)
class Snapshot:
    """A file as analysed at one version, with its last check."""

    uri: str
    version: int  # of the text `anatomy` was read from
    anatomy: Anatomy
    reference_problem: str | None  # why a solution has no reference, when it has none
    report: Report | None  # the last check, of whatever text was saved then
    checked: bool  # `report` was computed on this very text
    reference: Pairing | None = None  # the reference's text and path, when it has one

    @property
    def current_report(self) -> Report | None:
        return self.report if self.checked else None


@dataclass(frozen=True)
class Answer:
    """What *Generate* and *Infill* answer the client."""

    ok: bool
    message: str = ""
    # Why the code written cannot be used as it is (actions.unusable, joined), for the client to say so and offer a
    # retry; empty when it can, or when nothing was written.
    unusable: str = ""


@dataclass(frozen=True)
class Started:
    """What *Benchmark* answers the client."""

    started: bool
    message: str
