"""The server's state and logic without a transport: the open files (text, anatomy, last check), the settings, and the
generate, infill and benchmark commands. dice_lsp/server.py wires it to LSP; tests drive it with a fake Editor
(dice_lsp/editor.py says what an editor must do, and what the session answers).

Nothing here blocks the event loop: files (a linked reference, a command's file that is not open) are read on a
thread of their own, and checks and generation run on worker threads that wait on child processes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Coroutine
from urllib.parse import urlparse
from urllib.request import url2pathname

from dice_lsp import actions
from dice_lsp.anatomy import Anatomy, Pairing, Span, find_reference, infill_split, parse, read_reference
from dice_lsp.checking import STAGE_WORDS, CheckRunner
from dice_lsp.editor import Answer, Editor, ProgressReport, Severity, Snapshot, Started
from dice_lsp.generation import EngineWorker, GenerationCancelled, GenerationError
from dice_lsp.generation_messages import Decoded, Job, Loading, Progress
from dice_lsp.settings import Settings, read_settings
from dice_lsp.status import Status

if TYPE_CHECKING:  # only for annotations: the harness's package loads its batch machinery on import
    from dice_lsp.harness.report import Report

log = logging.getLogger("dice_lsp")
DEBOUNCE_S = 0.25  # typing: analyse once the text has settled this long
CANCEL_POLL_S = 0.2  # how often a generation or a check looks whether its progress was cancelled in the editor
UNTRUSTED = ("this workspace is not trusted, so kernels are not built or run. Trust the workspace to check kernels "
             "on save.")


# -- what the session knows about one file ---------------------------------------------------------------------------
@dataclass
class Document:
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


class Session:
    def __init__(self, editor: Editor, checks: CheckRunner | None = None, engine: EngineWorker | None = None,
                 debounce_s: float = DEBOUNCE_S) -> None:
        self.editor = editor
        self.checks = CheckRunner() if checks is None else checks
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

    # -- settings ------------------------------------------------------------------------------------------------------
    async def initialized(self, options: Any = None) -> None:
        """The client is ready; `options` is its initializationOptions (the `dice` section, or an object holding
        it under "dice")."""
        self.given = dice_section(options, bare=True) or {}
        await self.reload_settings()
        self.editor.status(Status("idle", "ready", model=self.settings.model or None))

    async def reload_settings(self) -> None:
        answered = await self.editor.configuration()
        reading = read_settings(answered if answered is not None else self.pushed, self.given)
        self.settings = reading.settings
        if reading.problems and reading.problems != self.problems:
            self.editor.show("warning", "some settings were not used: " + "; ".join(reading.problems))
        self.problems = reading.problems

    async def configuration_changed(self, pushed: Any = None) -> None:
        """The editor's settings changed; `pushed` is what the notification carried (used when the editor cannot
        be asked)."""
        section = dice_section(pushed, bare=False)
        if section is not None:
            self.pushed = section
        await self.reload_settings()
        await asyncio.gather(*(self.refresh(uri) for uri in list(self.documents)))

    # -- documents -----------------------------------------------------------------------------------------------------
    def open(self, uri: str, text: str, version: int) -> None:
        doc = self.document(uri)
        doc.text, doc.version = text, version
        self.spawn(self.opened(uri))

    async def opened(self, uri: str) -> None:
        analysis = await self.refresh(uri)
        settings = self.settings
        if analysis is not None and analysis.anatomy.cuda_sources and settings.run_on_save and \
                settings.trusted_workspace:
            self.checks.prepare(settings)  # a save is likely next: its check finds the shared build parts ready

    def change(self, uri: str, text: str, version: int) -> None:
        """The file's new text: analysed once typing pauses for `debounce_s`."""
        doc = self.document(uri)
        doc.text, doc.version = text, version
        if doc.debounce is not None:
            doc.debounce.cancel()
        doc.debounce = asyncio.get_running_loop().call_later(self.debounce_s, lambda: self.spawn(self.refresh(uri)))

    def save(self, uri: str) -> None:
        self.spawn(self.saved(uri))

    async def saved(self, uri: str) -> None:
        analysis = await self.refresh(uri)
        if self.settings.run_on_save and analysis is not None and analysis.anatomy.model_new is not None:
            await self.check(uri, "saved")

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
        """End every check, worker and the generation child (the LSP shutdown, or a signal); once."""
        if self.closing:
            return
        self.closing = True
        for doc in self.documents.values():
            if doc.generating is not None:
                doc.generating.set()
        for task in list(self.tasks):
            task.cancel()
        self.checks.close()
        self.engine.close()
        self.files.shutdown(wait=False, cancel_futures=True)

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

    def document(self, uri: str) -> Document:
        return self.documents.setdefault(uri, Document())

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
        if pairing.text is not None and anatomy.model is None:
            anatomy = parse(text, pairing.text)
        return Analysis(text, version, anatomy, pairing)

    async def read(self, function: Callable, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.files, function, *args)

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

    def offers(self, uri: str, offset: int | None) -> list[actions.Offer]:
        """The code actions for the cursor at `offset` of the file (None: anywhere)."""
        return actions.offers(self.snapshot(uri).anatomy, offset)

    def fixes(self, uri: str, within: Span) -> list[actions.Fix]:
        """The mechanical fixes of the findings that touch `within` of the file, as last analysed."""
        return actions.fixes(self.snapshot(uri).anatomy, within)

    def show_once(self, kind: str, message: str, severity: Severity = "error") -> None:
        if kind in self.shown:
            return
        self.shown.add(kind)
        self.editor.show(severity, message)

    # -- checks --------------------------------------------------------------------------------------------------------
    async def benchmark(self, uri: str) -> Started:
        why = await self.check(uri, "benchmark")
        return Started(why is None, why or "checking")

    async def check(self, uri: str, reason: str) -> str | None:
        """Start a harness check of the file in the background; returns why not, or None when started."""
        doc = self.document(uri)
        doc.check_serial += 1  # before anything is awaited: of two saves, the later one wins
        serial = doc.check_serial
        analysis = await self.analysis(uri)
        settings = self.settings
        if doc.check_serial != serial:
            return "a newer check replaced this one"
        if analysis.anatomy.model_new is None:
            return "this file has no `class ModelNew` to check"
        if not settings.trusted_workspace:
            if reason == "benchmark":  # asked for: say why nothing happens, each time
                self.editor.show("warning", UNTRUSTED)
            else:
                self.show_once("untrusted", UNTRUSTED, "warning")
            return "the workspace is not trusted"
        pairing = analysis.pairing
        if pairing is None or pairing.text is None:
            problem = pairing.problem if pairing is not None else "no reference"
            self.show_once("no-reference", problem, "warning")
            return problem
        if analysis.anatomy.cuda_sources and not nvcc_available(settings.cuda_home):
            self.show_once("no-nvcc", "no nvcc found in dice.cudaHome" if settings.cuda_home else
                           "no nvcc found on PATH or in CUDA_HOME; install the CUDA toolkit or set dice.cudaHome")
            return "no nvcc"
        self.editor.status(Status("checking", f"{reason}: building and checking", uri=uri))
        progress = await self.editor.progress(f"Checking {Path(urlparse(uri).path).name or uri}")
        if doc.check_serial != serial:
            progress.end("replaced by a newer check")
            return "a newer check replaced this one"
        progress.report("building and checking against the reference")
        loop = asyncio.get_running_loop()
        watcher = asyncio.ensure_future(_watch(progress, lambda: self.checks.cancel(uri)))

        def finished(report) -> None:  # on the check's thread
            if not loop.is_closed():
                loop.call_soon_threadsafe(self.check_finished, uri, serial, analysis.text, report, progress, watcher)

        def staged(name: str) -> None:  # on the check's thread: the editor's progress names the stage
            if not loop.is_closed():
                loop.call_soon_threadsafe(progress.report, STAGE_WORDS.get(name, name))

        self.checks.start(uri, pairing.text, analysis.text, settings, finished, staged)
        return None

    def check_finished(self, uri: str, serial: int, text: str, report: Report | None, progress: ProgressReport,
                       watcher: asyncio.Future) -> None:
        watcher.cancel()
        doc = self.documents.get(uri)
        current = doc is not None and serial == doc.check_serial
        progress.end(report.summary() if report is not None and current else "replaced by a newer check")
        if not current or report is None:
            return  # closed, or a newer save superseded this check: never let old results replace newer ones
        if report.status == "cancelled":
            self.editor.status(Status("idle", "check cancelled", uri=uri))
            return
        doc.report, doc.report_text = report, text
        if report.status == "built-not-run":
            self.show_once("no-gpu", f"{report.message or 'no CUDA GPU found'}: kernels are built but not run. "
                                     "Checking correctness and speed needs a CUDA GPU.", "warning")
        self.editor.status(Status("idle", report.summary(), uri=uri, speedup=report.speedup_eager))
        if doc.anatomy is not None:
            self.editor.publish(self.snapshot(uri))
        self.editor.refresh_views()

    # -- generation ----------------------------------------------------------------------------------------------------
    async def generate(self, uri: str, infill: bool) -> Answer:
        """*Generate* (a new solution for the file's Model) or *Infill* (the TODO core of its ModelNew skeleton)."""
        analysis = await self.analysis(uri)  # the edit applies to this version only: the editor refuses it after typing
        anatomy, path, settings = analysis.anatomy, uri_path(uri), self.settings
        if infill:
            if anatomy.model_new is None or infill_split(anatomy) is None:
                return self.refuse("no ModelNew skeleton with an empty or TODO CUDA source to infill")
            assert analysis.pairing is not None
            reference, missing, skeleton = analysis.pairing.text, analysis.pairing.problem, anatomy.text
        else:
            if anatomy.model is None:
                return self.refuse("no `class Model` in this file to generate a kernel for")
            reference, missing, skeleton = anatomy.text, None, None
        if reference is None:
            self.show_once("no-reference", missing, "warning")
            return Answer(False, missing or "no reference")
        title = "Infilling kernel core" if infill else "Generating CUDA kernel"
        job = Job(reference=reference, model=settings.model, device=settings.device, dtype=settings.dtype,
                  decoding=settings.decoding, skeleton=skeleton)
        try:
            drafts = await self._run(uri, title, job)
        except (GenerationCancelled, asyncio.CancelledError) as cancel:
            if self.document(uri).generating is None:  # no newer request for this file is running
                self.editor.status(Status("idle", "generation cancelled", uri=uri))
            if isinstance(cancel, asyncio.CancelledError):
                raise  # the client cancelled the request: it gets the protocol's answer to a cancel
            return Answer(False, "cancelled")
        except GenerationError as error:
            if not self.closing:
                self.show_once(f"generation-{error.kind}", str(error))
                self.editor.status(Status("error", str(error), uri=uri))
            return Answer(False, str(error))
        self.editor.status(Status("idle", "generation finished", uri=uri,
                                  model=settings.model or "bundled default model"))
        return await self.place(uri, analysis, drafts[0], infill, title)

    def refuse(self, why: str) -> Answer:
        """A command that cannot start on this file: said where the user looks (editors drop a command's answer),
        and answered."""
        self.editor.show("warning", why)
        return Answer(False, why)

    async def place(self, uri: str, analysis: Analysis, draft, infill: bool, title: str) -> Answer:
        """Put a draft where it goes: a new file written beside the problem and opened, or an edit of this file that
        the user confirms."""
        text, location = draft.code, self.settings.solution_location
        problems: tuple[str, ...] = ()
        if text is None:
            message = f"the model wrote no usable kernel: {draft.note}"
            problems = (message,)
            if infill or location == "sameFile":
                # Never put raw model output into the user's own file.
                self.editor.show("warning", f"{message}; nothing changed")
                return Answer(False, message)
            # A new file loses nothing: keep what the model wrote, as comments, so the user can see why.
            text = f"# dice-lsp: {message}. The model's raw output:\n" + "".join(
                f"# {line}\n" for line in draft.raw.splitlines())
        try:
            edit = actions.solution_edit(analysis.anatomy, text, infill, uri_path(uri), location)
        except actions.InfillMismatch as error:
            message = f"the infilled kernel could not be placed: {error}"
            self.editor.show("warning", f"{message}; nothing changed")
            return Answer(False, message)
        if isinstance(edit, actions.Replace):
            after = edit.within[:edit.span.start] + edit.text + edit.within[edit.span.end:]
            problems = actions.unusable(parse(after, analysis.pairing.text if analysis.pairing else None))
            applied = await self.editor.apply(uri, analysis.version, edit, title)
            return Answer(applied.applied, applied.reason, "; ".join(problems) if applied.applied else "")
        problems = problems or actions.unusable(parse(edit.text, analysis.anatomy.text))
        try:
            await self.read(write_new, edit.path, edit.text)
        except OSError as error:
            message = f"could not write {edit.path}: {error.strerror or error}"
            self.editor.show("error", message)
            return Answer(False, message)
        if not await self.editor.show_document(edit.path.as_uri()):
            self.editor.show("info", f"wrote {edit.path}")
        return Answer(True, f"wrote {edit.path}", "; ".join(problems))

    async def _run(self, uri: str, title: str, job: Job):
        """Run `job` in the engine's child with the editor's progress (cancellable there, or by cancelling the
        request); its drafts. A cancel returns only once decoding has stopped."""
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

        watcher = asyncio.ensure_future(_watch(progress, cancelled.set))
        running = loop.run_in_executor(None, self.engine.run, job, on_progress, cancelled)
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            cancelled.set()  # the request was cancelled ($/cancelRequest): stop decoding too, and wait until it has
            await asyncio.gather(running, return_exceptions=True)
            raise
        finally:
            watcher.cancel()
            if doc.generating is cancelled:
                doc.generating = None
            progress.end("cancelled" if cancelled.is_set() else "done")


async def _watch(progress: ProgressReport, on_cancel: Callable[[], None]) -> None:
    """Until cancelled itself: calls `on_cancel` once the user cancels `progress` in the editor."""
    while not progress.cancelled:
        await asyncio.sleep(CANCEL_POLL_S)
    on_cancel()


def dice_section(value: Any, bare: bool) -> dict[str, Any] | None:
    """The `dice` settings in what a client sent: value["dice"]; with `bare`, `value` itself when it has no "dice"
    key (initializationOptions may be the section itself)."""
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("dice"), dict):
        return value["dice"]
    return value if bare and "dice" not in value else None


def read_text(path: Path) -> str:
    """A file a command names that is not open: read as a reference is (a regular file, at most a MiB); "" when it
    cannot be read."""
    try:
        return read_reference(path)
    except OSError:
        return ""


def write_new(path: Path, text: str) -> None:
    """Write a new file, never over one that exists (it may have appeared since its name was chosen)."""
    with open(path, "x", encoding="utf-8") as out:
        out.write(text)


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
