"""*Generate* (a new solution for a file's Model) and *Infill* (the TODO core of its ModelNew skeleton): a job for
the engine's child (dice_lsp/generation.py), decoded with the editor's progress and cancellable there or by
cancelling the request, and its first draft placed: a new file beside the problem, or an edit the user confirms.
"""

from __future__ import annotations

import asyncio
import threading

from dice_lsp import actions
from dice_lsp.anatomy import infill_split, parse
from dice_lsp.generation import GenerationCancelled, GenerationError
from dice_lsp.generation_messages import Decoded, Drafted, Job, JobProgress, Loading
from dice_lsp.session.editor import Answer
from dice_lsp.session.files import uri_path, write_new
from dice_lsp.session.state import Analysis, Session, until_cancelled
from dice_lsp.status import ServerStatus


async def solution(session: Session, uri: str) -> Answer:
    """*Generate*: a solution for the file's `class Model`."""
    return await _write(session, uri, infill=False)


async def infill(session: Session, uri: str) -> Answer:
    """*Infill*: the core of the file's ModelNew skeleton, whose CUDA source is empty or a TODO."""
    return await _write(session, uri, infill=True)


async def _write(session: Session, uri: str, infill: bool) -> Answer:
    analysis = await session.analysis(uri)  # the edit applies to this version only: the editor refuses it after typing
    anatomy, settings = analysis.anatomy, session.settings
    if infill:
        if anatomy.model_new is None or infill_split(anatomy) is None:
            return refuse(session, "no ModelNew skeleton with an empty or TODO CUDA source to infill")
        assert analysis.pairing is not None
        reference, missing, skeleton = analysis.pairing.text, analysis.pairing.problem, anatomy.text
    else:
        if anatomy.model is None:
            return refuse(session, "no `class Model` in this file to generate a kernel for")
        reference, missing, skeleton = anatomy.text, None, None
    if reference is None:
        session.show_once("no-reference", missing, "warning")
        return Answer(False, missing or "no reference")
    title = "Infilling kernel core" if infill else "Generating CUDA kernel"
    job = Job(reference=reference, model=settings.model, device=settings.device, dtype=settings.dtype,
              decoding=settings.decoding, skeleton=skeleton)
    try:
        drafts = await decode(session, uri, title, job)
    except (GenerationCancelled, asyncio.CancelledError) as cancel:
        if session.document(uri).generating is None:  # no newer request for this file is running
            session.editor.status(ServerStatus("idle", "generation cancelled", uri=uri))
        if isinstance(cancel, asyncio.CancelledError):
            raise  # the client cancelled the request: it gets the protocol's answer to a cancel
        return Answer(False, "cancelled")
    except GenerationError as error:
        if not session.closing:
            session.show_once(f"generation-{error.kind}", str(error))
            session.editor.status(ServerStatus("error", str(error), uri=uri))
        return Answer(False, str(error))
    session.editor.status(ServerStatus("idle", "generation finished", uri=uri,
                                       model=settings.model or "bundled default model"))
    return await place(session, uri, analysis, drafts[0], infill, title)


def refuse(session: Session, why: str) -> Answer:
    """A command that cannot start on this file: said where the user looks (editors drop a command's answer), and
    answered."""
    session.editor.show("warning", why)
    return Answer(False, why)


async def decode(session: Session, uri: str, title: str, job: Job) -> tuple[Drafted, ...]:
    """Run `job` in the engine's child with the editor's progress (cancellable there, or by cancelling the
    request); its drafts. A cancel returns only once decoding has stopped."""
    doc = session.document(uri)
    if doc.generating is not None:
        doc.generating.set()  # a new request for the same file replaces the running one
    cancelled = threading.Event()
    doc.generating = cancelled
    progress = await session.editor.progress(title)
    session.editor.status(ServerStatus("generating", title, uri=uri))
    loop = asyncio.get_running_loop()
    loading = False

    def progressed(message: JobProgress) -> None:  # on the loop
        nonlocal loading
        progress.report(message.describe())
        if isinstance(message, Loading):
            loading = True
            session.editor.status(ServerStatus("loading-model", message.describe(), uri=uri))
        elif isinstance(message, Decoded) and loading:
            loading = False
            session.editor.status(ServerStatus("generating", title, uri=uri))

    def on_progress(message: JobProgress) -> None:  # on the worker thread
        if not loop.is_closed():
            loop.call_soon_threadsafe(progressed, message)

    watcher = asyncio.ensure_future(until_cancelled(progress, cancelled.set))
    running = loop.run_in_executor(None, session.engine.run, job, on_progress, cancelled)
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


async def place(session: Session, uri: str, analysis: Analysis, draft: Drafted, infill: bool, title: str) -> Answer:
    """Put a draft where it goes: a new file written beside the problem and opened, or an edit of this file that
    the user confirms. The answer says why the code cannot be used as it is, when it cannot."""
    text, location = draft.code, session.settings.solution_location
    problems: tuple[str, ...] = ()
    if text is None:
        message = f"the model wrote no usable kernel: {draft.note}"
        problems = (message,)
        if infill or location == "sameFile":
            # Never put raw model output into the user's own file.
            session.editor.show("warning", f"{message}; nothing changed")
            return Answer(False, message)
        # A new file loses nothing: keep what the model wrote, as comments, so the user can see why.
        text = f"# dice-lsp: {message}. The model's raw output:\n" + "".join(
            f"# {line}\n" for line in draft.raw.splitlines())
    try:
        edit = actions.solution_edit(analysis.anatomy, text, infill, uri_path(uri), location)
    except actions.InfillMismatch as error:
        message = f"the infilled kernel could not be placed: {error}"
        session.editor.show("warning", f"{message}; nothing changed")
        return Answer(False, message)
    if isinstance(edit, actions.Replace):
        after = edit.within[:edit.span.start] + edit.text + edit.within[edit.span.end:]
        problems = actions.unusable(parse(after, analysis.pairing.text if analysis.pairing else None))
        applied = await session.editor.apply(uri, analysis.version, edit, title)
        return Answer(applied.applied, applied.reason, "; ".join(problems) if applied.applied else "")
    problems = problems or actions.unusable(parse(edit.text, analysis.anatomy.text))
    try:
        await session.read(write_new, edit.path, edit.text)
    except OSError as error:
        message = f"could not write {edit.path}: {error.strerror or error}"
        session.editor.show("error", message)
        return Answer(False, message)
    if not await session.editor.show_document(edit.path.as_uri()):
        session.editor.show("info", f"wrote {edit.path}")
    return Answer(True, f"wrote {edit.path}", "; ".join(problems))
