"""The session's state: the open files (text, anatomy, pairing, last check), the settings, the check runner and the
engine, and what every command needs of them (a file's analysis and snapshot, a message shown once, work started for
a notification). What happens on each notification or command is in the modules beside this one.

Nothing here blocks the event loop: files (a linked reference, a command's file that is not open) are read on
threads of their own.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Coroutine

from dice_lsp.anatomy import Anatomy, Pairing, find_reference, parse
from dice_lsp.checking import CheckRunner
from dice_lsp.generation import EngineWorker
from dice_lsp.session.editor import Editor, ProgressReport, Severity, Snapshot
from dice_lsp.session.files import read_text, uri_path
from dice_lsp.settings import Settings

if TYPE_CHECKING:  # only for annotations: the harness's package loads its batch machinery on import
    from dice_lsp.harness.report import Report

log = logging.getLogger("dice_lsp")
DEBOUNCE_S = 0.25  # typing: analyse once the text has settled this long
CANCEL_POLL_S = 0.2  # how often a generation or a check looks whether its progress was cancelled in the editor


@dataclass
class Document:
    """What the session knows about one file."""

    text: str | None = None  # None: not open in the editor (read from disk when a command asks)
    version: int = 0
    anatomy: Anatomy | None = None
    analysed: int = 0  # the version of the text `anatomy` was read from (typing may have moved `version` on)
    pairing: Pairing | None = None  # a solution's reference, or why it has none; None for a file with no ModelNew
    report: Report | None = None  # the last check's Report
    report_text: str | None = None  # the text that report was computed on
    analysis_serial: int = 0  # bumps on every analysis; only the newest one is kept
    check_serial: int = 0  # bumps on every check request; a finished check publishes only if still current
    debounce: asyncio.TimerHandle | None = None
    generating: threading.Event | None = None  # set to cancel the running generation


@dataclass(frozen=True)
class Analysis:
    """A file's text at one version, parsed, and (for a solution) paired with its reference."""

    text: str
    version: int
    anatomy: Anatomy
    pairing: Pairing | None
    reference: Anatomy | None = None  # the paired reference's anatomy: a check reads neither file again


class Session:
    """The editor's logic without a transport: dice_lsp/server.py drives it over LSP, tests drive it with a recording
    Editor (dice_lsp/session/editor.py says what an editor must do)."""

    def __init__(self, editor: Editor, check_runner: CheckRunner | None = None, engine: EngineWorker | None = None,
                 debounce_s: float = DEBOUNCE_S) -> None:
        self.editor = editor
        self.check_runner = CheckRunner() if check_runner is None else check_runner
        self.engine = EngineWorker() if engine is None else engine
        self.debounce_s = debounce_s
        self.settings = Settings()
        self.given: dict[str, Any] = {}  # the `dice` section of initializationOptions: under what the editor answers
        self.pushed: dict[str, Any] | None = None  # the last `dice` section a didChangeConfiguration carried
        self.problems: tuple[str, ...] = ()  # what the settings last read could not use
        self.documents: dict[str, Document] = {}
        self.shown: set[str] = set()  # kinds of message already shown once
        self.tasks: set[asyncio.Task] = set()  # analyses and checks started by notifications, which answer nothing
        # Reads of a file named by a link or a command: never on the loop, whatever the path turns out to be
        self.files = ThreadPoolExecutor(max_workers=2, thread_name_prefix="dice-files")
        self.closing = False

    # -- files ---------------------------------------------------------------------------------------------------------
    def document(self, uri: str) -> Document:
        return self.documents.setdefault(uri, Document())

    async def shown_anatomy(self, uri: str) -> Anatomy:
        """The file as the editor has it open; else as it is on disk, parsed now. An editor may ask for a file's lenses
        before it says it opened it, and asks again only once the text changes: an answer from no text would leave
        the file without its lenses (VS Code, now and then, in tests/e2e/test_vscode.py)."""
        doc = self.documents.get(uri)
        if doc is not None and doc.text is not None:
            return self.snapshot(uri).anatomy
        log.info("asked for the lenses of %s, which the editor has not opened: read from the disk", uri)
        return (await self.analysis(uri)).anatomy

    async def analysis(self, uri: str) -> Analysis:
        """The file's text now (the editor's while it is open, else what is on disk), parsed and paired."""
        doc = self.documents.get(uri)
        if doc is not None and doc.text is not None:
            text, version = doc.text, doc.version
        else:
            path = uri_path(uri)
            text = await self.read(read_text, path) if path is not None else ""
            version = doc.version if doc is not None else 0
        return await self.analyse(uri, text, version)

    async def analyse(self, uri: str, text: str, version: int) -> Analysis:
        anatomy = parse(text)
        if anatomy.model_new is None:
            return Analysis(text, version, anatomy, None)
        path = uri_path(uri)
        if anatomy.reference_link is not None and path is not None:
            pairing = await self.read(find_reference, anatomy, path)  # a link may name anything: /dev/stdin, a FIFO
        else:
            pairing = find_reference(anatomy, path)  # the file's own Model, or why there is none: reads nothing
        reference = None
        if pairing.text is not None:  # the file's own Model, or the linked problem's
            reference = anatomy if anatomy.model is not None else parse(pairing.text)
            anatomy = anatomy if anatomy.model is not None else parse(text, reference)
        return Analysis(text, version, anatomy, pairing, reference)

    async def refresh(self, uri: str) -> Analysis | None:
        """Analyse an open file again and publish its diagnostics; None when it is not open (or changed meanwhile:
        the newer analysis publishes)."""
        doc = self.documents.get(uri)
        if doc is None or doc.text is None:
            return None
        doc.analysis_serial += 1
        serial = doc.analysis_serial
        analysis = await self.analyse(uri, doc.text, doc.version)
        if self.documents.get(uri) is not doc or doc.analysis_serial != serial:
            return None
        doc.anatomy, doc.analysed, doc.pairing = analysis.anatomy, analysis.version, analysis.pairing
        self.editor.publish(self.snapshot(uri))
        return analysis

    def snapshot(self, uri: str) -> Snapshot:
        """The file as last analysed; before its first analysis ends, its text alone (no file is read here)."""
        doc = self.documents.get(uri) or Document()
        anatomy = doc.anatomy or parse(doc.text or "")
        missing = doc.pairing.problem if doc.pairing is not None and doc.pairing.text is None else None
        reference = doc.pairing if doc.pairing is not None and doc.pairing.text is not None else None
        return Snapshot(uri, doc.analysed if doc.anatomy is not None else doc.version, anatomy, missing, doc.report,
                        doc.report is not None and doc.report_text == anatomy.text, reference)

    async def read(self, function: Callable, *args: Any) -> Any:
        """`function(*args)` on the session's file threads: a path may name a FIFO or a hung mount."""
        return await asyncio.get_running_loop().run_in_executor(self.files, function, *args)

    # -- what every command needs --------------------------------------------------------------------------------------
    def show_once(self, kind: str, message: str, severity: Severity = "error") -> None:
        if kind in self.shown:
            return
        self.shown.add(kind)
        self.editor.show(severity, message)

    def spawn(self, work: Coroutine) -> asyncio.Task:
        """Run `work` on the loop for a notification (which has nobody to answer); its failure goes to the log."""
        task = asyncio.ensure_future(work)
        self.tasks.add(task)

        def done(task: asyncio.Task) -> None:
            self.tasks.discard(task)
            if not task.cancelled() and task.exception() is not None:
                log.error("handling a notification failed", exc_info=task.exception())
        task.add_done_callback(done)
        return task

    async def settled(self) -> None:
        """Until every analysis and check start in flight has finished (tests wait on this)."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)

    def shutdown(self) -> None:
        """End every check, worker and the generation child (the LSP shutdown, or a signal); once."""
        if self.closing:
            return
        self.closing = True
        for doc in self.documents.values():
            if doc.generating is not None:
                doc.generating.set()
        for task in list(self.tasks):
            task.cancel()
        self.check_runner.close()
        self.engine.close()
        self.files.shutdown(wait=False, cancel_futures=True)


async def until_cancelled(progress: ProgressReport, on_cancel: Callable[[], None]) -> None:
    """Until cancelled itself: calls `on_cancel` once the user cancels `progress` in the editor."""
    while not progress.cancelled:
        await asyncio.sleep(CANCEL_POLL_S)
    on_cancel()
