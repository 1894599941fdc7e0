"""The server's state and logic without a transport: the open files (text, anatomy, last check), the settings, and the
generate, infill and benchmark commands. dice_lsp/server.py wires it to LSP; tests drive it with a fake Editor.

Nothing here blocks the event loop: checks and generation run on worker threads that wait on child processes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol
from urllib.parse import urlparse
from urllib.request import url2pathname

from dice_lsp import actions
from dice_lsp.anatomy import Anatomy, find_reference, infill_split, parse
from dice_lsp.checking import CheckRunner
from dice_lsp.generation import EngineWorker, GenerationCancelled, GenerationError
from dice_lsp.generation_messages import Decoded, Job, Loading, Progress
from dice_lsp.settings import Settings
from dice_lsp.status import Status

if TYPE_CHECKING:  # only for annotations: the harness's package loads its batch machinery on import
    from dice_lsp.harness.report import Report

log = logging.getLogger("dice_lsp")
DEBOUNCE_S = 0.25  # typing: analyse once the text has settled this long
CANCEL_POLL_S = 0.2  # how often a generation looks whether its progress was cancelled in the editor

Severity = Literal["error", "warning", "info"]


# -- what the session needs from the editor (server.py implements it over LSP; tests with a fake) ---------------------
class ProgressReport(Protocol):
    """One generation's progress in the editor."""

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
        """Show the file's diagnostics: its anatomy's findings, and its last check when it was of this text."""

    def clear(self, uri: str) -> None:
        """Remove the file's diagnostics (it was closed)."""

    def show(self, severity: Severity, message: str) -> None:
        """A message the user sees (a notification)."""

    def status(self, status: Status) -> None: ...

    def refresh_code_lenses(self) -> None: ...

    async def configuration(self) -> Any:
        """The `dice` settings section as the editor sends it; None when it cannot."""

    async def progress(self, title: str) -> ProgressReport:
        """Progress shown for a long job; one that reports nowhere when the editor shows none."""

    async def apply(self, uri: str, version: int, edit: actions.Replace | actions.NewFile, label: str) -> Applied:
        """Apply `edit` (a Replace of the file `uri` at `version`, or a new file); whether the editor did."""


class NoProgress:
    """Progress for an editor that shows none: reports nowhere, never cancelled."""

    cancelled = False

    def report(self, message: str) -> None:
        pass

    def end(self, message: str) -> None:
        pass


# -- what the session knows about one file, and what it answers ------------------------------------------------------
@dataclass
class Document:
    text: str | None = None  # None: not open in the editor (read from disk when a command asks)
    version: int = 0
    anatomy: Anatomy | None = None
    reference_problem: str | None = None  # why a solution has no reference, when it has none
    report: Report | None = None  # the last check's Report
    report_text: str | None = None  # the text that report was computed on
    check_serial: int = 0  # bumps on every check request; a finished check publishes only if still current
    debounce: asyncio.TimerHandle | None = None
    generating: threading.Event | None = None  # set to cancel the running generation


@dataclass(frozen=True)
class Snapshot:
    """A file as analysed at one version, with its last check."""

    uri: str
    version: int
    anatomy: Anatomy
    reference_problem: str | None
    report: Report | None  # the last check, of whatever text was saved then
    checked: bool  # `report` was computed on this very text

    @property
    def current_report(self) -> Report | None:
        return self.report if self.checked else None


@dataclass(frozen=True)
class Answer:
    """What *Generate* and *Infill* answer the client."""

    ok: bool
    message: str = ""


@dataclass(frozen=True)
class Started:
    """What *Benchmark* answers the client."""

    started: bool
    message: str


class Session:
    def __init__(self, editor: Editor, checks: CheckRunner | None = None, engine: EngineWorker | None = None,
                 debounce_s: float = DEBOUNCE_S) -> None:
        self.editor = editor
        self.checks = CheckRunner() if checks is None else checks
        self.engine = EngineWorker() if engine is None else engine
        self.debounce_s = debounce_s
        self.settings = Settings()
        self.documents: dict[str, Document] = {}
        self.shown: set[str] = set()  # kinds of message already shown once

    # -- settings ------------------------------------------------------------------------------------------------------
    async def initialized(self) -> None:
        await self.reload_settings()
        self.editor.status(Status("idle", "ready", model=self.settings.model or None))

    async def reload_settings(self) -> None:
        self.settings = Settings.from_client(await self.editor.configuration())

    async def configuration_changed(self) -> None:
        await self.reload_settings()
        for uri in list(self.documents):
            self.refresh(uri)

    # -- documents -----------------------------------------------------------------------------------------------------
    def open(self, uri: str, text: str, version: int) -> None:
        doc = self.document(uri)
        doc.text, doc.version = text, version
        self.refresh(uri)
        settings = self.settings
        if settings.run_on_save and settings.trusted_workspace and doc.anatomy is not None and doc.anatomy.cuda_sources:
            self.checks.prepare(settings)  # a save is likely next: its check finds the shared build parts ready

    def change(self, uri: str, text: str, version: int) -> None:
        """The file's new text: analysed once typing pauses for `debounce_s`."""
        doc = self.document(uri)
        doc.text, doc.version = text, version
        if doc.debounce is not None:
            doc.debounce.cancel()
        doc.debounce = asyncio.get_running_loop().call_later(self.debounce_s, self.refresh, uri)

    def save(self, uri: str) -> None:
        self.refresh(uri)
        doc = self.document(uri)
        if self.settings.run_on_save and doc.anatomy is not None and doc.anatomy.model_new is not None:
            self.start_check(uri, "saved")

    def close(self, uri: str) -> None:
        self.checks.cancel(uri)
        doc = self.documents.pop(uri, None)
        if doc is not None:
            if doc.debounce is not None:
                doc.debounce.cancel()
            if doc.generating is not None:
                doc.generating.set()
        self.editor.clear(uri)

    def shutdown(self) -> None:
        self.checks.close()
        self.engine.close()

    def document(self, uri: str) -> Document:
        return self.documents.setdefault(uri, Document())

    def text(self, uri: str) -> str:
        """The file's text: the editor's while it is open, else what is on disk ("" when nothing is)."""
        doc = self.documents.get(uri)
        if doc is not None and doc.text is not None:
            return doc.text
        path = uri_path(uri)
        try:
            return path.read_text(encoding="utf-8", errors="replace") if path is not None else ""
        except OSError:
            return ""

    def analyse(self, uri: str) -> Anatomy:
        doc = self.document(uri)
        text = self.text(uri)
        anatomy = parse(text)
        missing = None
        if anatomy.model_new is not None and anatomy.model is None:
            pairing = find_reference(anatomy, uri_path(uri))
            missing = pairing.problem
            if pairing.text is not None:
                anatomy = parse(text, pairing.text)
        doc.anatomy = anatomy
        doc.reference_problem = missing
        return anatomy

    def snapshot(self, uri: str) -> Snapshot:
        """The file as last analysed (analysed now if it never was)."""
        doc = self.document(uri)
        anatomy = doc.anatomy or self.analyse(uri)
        return Snapshot(uri, doc.version, anatomy, doc.reference_problem, doc.report,
                        doc.report is not None and doc.report_text == anatomy.text)

    def refresh(self, uri: str) -> None:
        """Analyse an open file again and publish its diagnostics."""
        doc = self.documents.get(uri)
        if doc is None or doc.text is None:
            return
        self.analyse(uri)
        self.editor.publish(self.snapshot(uri))

    def offers(self, uri: str, offset: int | None) -> list[actions.Offer]:
        """The code actions for the cursor at `offset` of the file (None: anywhere)."""
        return actions.offers(self.snapshot(uri).anatomy, offset)

    def show_once(self, kind: str, message: str, severity: Severity = "error") -> None:
        if kind in self.shown:
            return
        self.shown.add(kind)
        self.editor.show(severity, message)

    # -- checks --------------------------------------------------------------------------------------------------------
    def benchmark(self, uri: str) -> Started:
        why = self.start_check(uri, "benchmark")
        return Started(why is None, why or "checking")

    def start_check(self, uri: str, reason: str) -> str | None:
        """Start a harness check of the file in the background; returns why not, or None when started."""
        settings = self.settings
        doc = self.document(uri)
        anatomy = self.analyse(uri)
        if anatomy.model_new is None:
            return "this file has no `class ModelNew` to check"
        if not settings.trusted_workspace:
            self.show_once("untrusted", "this workspace is not trusted, so kernels are not built or run. Trust the "
                                        "workspace to check kernels on save.", "warning")
            return "the workspace is not trusted"
        pairing = find_reference(anatomy, uri_path(uri))
        if pairing.text is None:
            self.show_once("no-reference", pairing.problem, "warning")
            return pairing.problem
        if anatomy.cuda_sources and not nvcc_available(settings.cuda_home):
            self.show_once("no-nvcc", "no nvcc found in dice.cudaHome" if settings.cuda_home else
                           "no nvcc found on PATH or in CUDA_HOME; install the CUDA toolkit or set dice.cudaHome")
            return "no nvcc"
        doc.check_serial += 1
        serial, text = doc.check_serial, anatomy.text
        self.editor.status(Status("checking", f"{reason}: building and checking", uri=uri))
        loop = asyncio.get_running_loop()

        def finished(report) -> None:  # on the check's thread
            if not loop.is_closed():
                loop.call_soon_threadsafe(self.check_finished, uri, serial, text, report)

        self.checks.start(uri, pairing.text, text, settings, finished)
        return None

    def check_finished(self, uri: str, serial: int, text: str, report: Report | None) -> None:
        doc = self.documents.get(uri)
        if doc is None or serial != doc.check_serial or report is None or report.status == "cancelled":
            return  # closed, or a newer save superseded this check: never let old results replace newer ones
        doc.report, doc.report_text = report, text
        if report.status == "built-not-run":
            self.show_once("no-gpu", f"{report.message or 'no CUDA GPU found'}: kernels are built but not run. "
                                     "Checking correctness and speed needs a CUDA GPU.", "warning")
        self.editor.status(Status("idle", report.summary(), uri=uri, speedup=report.speedup_eager))
        if doc.anatomy is not None:
            self.editor.publish(self.snapshot(uri))
        self.editor.refresh_code_lenses()

    # -- generation ----------------------------------------------------------------------------------------------------
    async def generate(self, uri: str, infill: bool) -> Answer:
        """*Generate* (a new solution for the file's Model) or *Infill* (the TODO core of its ModelNew skeleton)."""
        anatomy = self.analyse(uri)
        version = self.document(uri).version  # the edit applies to this text only: the editor refuses it after typing
        path = uri_path(uri)
        settings = self.settings
        if infill:
            if anatomy.model_new is None or infill_split(anatomy) is None:
                return Answer(False, "no ModelNew skeleton with an empty or TODO CUDA source to infill")
            pairing = find_reference(anatomy, path)
            reference, missing, skeleton = pairing.text, pairing.problem, anatomy.text
        else:
            if anatomy.model is None:
                return Answer(False, "no `class Model` in this file to generate a kernel for")
            reference, missing, skeleton = anatomy.text, None, None
        if reference is None:
            self.show_once("no-reference", missing, "warning")
            return Answer(False, missing)
        title = "Infilling kernel core" if infill else "Generating CUDA kernel"
        job = Job(reference=reference, model=settings.model, device=settings.device, dtype=settings.dtype,
                  decoding=settings.decoding, skeleton=skeleton)
        try:
            drafts = await self._run(uri, title, job)
        except GenerationCancelled:
            return Answer(False, "cancelled")
        except GenerationError as error:
            self.show_once(f"generation-{error.kind}", str(error))
            self.editor.status(Status("error", str(error), uri=uri))
            return Answer(False, str(error))
        self.editor.status(Status("idle", "generation finished", uri=uri,
                                  model=settings.model or "bundled default model"))
        draft = drafts[0]
        text = draft.code
        if text is None:
            message = f"the model wrote no usable kernel: {draft.note}"
            if infill or settings.solution_location == "sameFile":
                # Never put raw model output into the user's own file.
                self.editor.show("warning", f"{message}; nothing changed")
                return Answer(False, message)
            # A new file loses nothing: keep what the model wrote, as comments, so the user can see why.
            text = f"# dice-lsp: {message}. The model's raw output:\n" + "".join(
                f"# {line}\n" for line in draft.raw.splitlines())
        try:
            edit = actions.solution_edit(anatomy, text, infill, path, settings.solution_location)
        except actions.InfillMismatch as error:
            message = f"the infilled kernel could not be placed: {error}"
            self.editor.show("warning", f"{message}; nothing changed")
            return Answer(False, message)
        applied = await self.editor.apply(uri, version, edit, title)
        return Answer(applied.applied, applied.reason)

    async def _run(self, uri: str, title: str, job: Job):
        """Run `job` in the engine's child with the editor's progress (cancellable there); its drafts."""
        doc = self.document(uri)
        if doc.generating is not None:
            doc.generating.set()  # a new request for the same file replaces the running one
        cancelled = threading.Event()
        doc.generating = cancelled
        progress = await self.editor.progress(title)
        self.editor.status(Status("generating", title, uri=uri))
        loop = asyncio.get_running_loop()
        loading = False

        def progressed(message: Progress) -> None:  # on the loop
            nonlocal loading
            progress.report(message.describe())
            if isinstance(message, Loading):
                loading = True
                self.editor.status(Status("loading-model", message.describe(), uri=uri))
            elif isinstance(message, Decoded) and loading:
                loading = False
                self.editor.status(Status("generating", title, uri=uri))

        def on_progress(message: Progress) -> None:  # on the worker thread
            if not loop.is_closed():
                loop.call_soon_threadsafe(progressed, message)

        watcher = asyncio.ensure_future(_watch(progress, cancelled))
        try:
            return await loop.run_in_executor(None, self.engine.run, job, on_progress, cancelled)
        finally:
            watcher.cancel()
            if doc.generating is cancelled:
                doc.generating = None
            progress.end("done")


async def _watch(progress: ProgressReport, cancelled: threading.Event) -> None:
    while not cancelled.is_set():
        if progress.cancelled:
            cancelled.set()
        await asyncio.sleep(CANCEL_POLL_S)


def uri_path(uri: str) -> Path | None:
    """The file a `file:` URI names; None for any other scheme (an unsaved buffer is `untitled:`)."""
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    path = url2pathname(parsed.path)
    return Path(f"//{parsed.netloc}{path}" if parsed.netloc else path)


def nvcc_available(cuda_home: str) -> bool:
    """Whether a build finds nvcc: in `cuda_home` (dice.cudaHome) when it is set, since the build then uses that
    toolkit and no other; else on PATH, in CUDA_HOME or in /usr/local/cuda."""
    if cuda_home:
        return Path(cuda_home, "bin", "nvcc").exists()
    homes = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"]
    return shutil.which("nvcc") is not None or any(home and Path(home, "bin", "nvcc").exists() for home in homes)
