"""A harness check of a solution, started on save or by *Benchmark*: refused with a reason the user can act on
(untrusted workspace, no reference, no nvcc), else run in the background with the editor's progress, its stages named
there and cancellable; the newest check of a file wins, and its report lands in the file's diagnostics, lenses and
hints.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from dice_lsp.checking import STAGE_WORDS
from dice_lsp.harness import Parsed
from dice_lsp.session.editor import ProgressReport, Started
from dice_lsp.session.files import uri_name
from dice_lsp.session.state import Analysis, Session, until_cancelled
from dice_lsp.settings import Settings
from dice_lsp.status import ServerStatus

if TYPE_CHECKING:  # only for annotations: the harness's package loads its batch machinery on import
    from dice_lsp.harness.report import Report

UNTRUSTED = ("this workspace is not trusted, so kernels are not built or run. Trust the workspace to check kernels "
             "on save.")


async def benchmark(session: Session, uri: str) -> Started:
    """*Benchmark now*: check the file whatever the settings say about saves."""
    why = await check(session, uri, "benchmark")
    return Started(why is None, why or "checking")


async def check(session: Session, uri: str, reason: str) -> str | None:
    """Start a harness check of the file in the background; returns why not, or None when started."""
    doc = session.document(uri)
    doc.check_serial += 1  # before anything is awaited: of two saves, the later one wins
    serial = doc.check_serial
    analysis = await session.analysis(uri)
    settings = session.settings  # the check runs with the settings of its start
    if doc.check_serial != serial:
        return "a newer check replaced this one"
    why = refusal(session, analysis, settings, reason)
    if why is not None:
        return why
    session.editor.status(ServerStatus("checking", f"{reason}: building and checking", uri=uri))
    progress = await session.editor.progress(f"Checking {uri_name(uri)}")
    if doc.check_serial != serial:
        progress.end("replaced by a newer check")
        return "a newer check replaced this one"
    progress.report("building and checking against the reference")
    _start(session, uri, serial, analysis, settings, progress)
    return None


def refusal(session: Session, analysis: Analysis, settings: Settings, reason: str) -> str | None:
    """Why the file cannot be checked now, shown to the user (once per kind on save, each time when asked); None
    when it can."""
    if analysis.anatomy.model_new is None:
        return "this file has no `class ModelNew` to check"
    if not settings.trusted_workspace:
        if reason == "benchmark":  # asked for: say why nothing happens, each time
            session.editor.show("warning", UNTRUSTED)
        else:
            session.show_once("untrusted", UNTRUSTED, "warning")
        return "the workspace is not trusted"
    pairing = analysis.pairing
    if pairing is None or pairing.text is None:
        problem = pairing.problem if pairing is not None else "no reference"
        session.show_once("no-reference", problem, "warning")
        return problem
    if analysis.anatomy.cuda_sources and not nvcc_available(settings.cuda_home):
        session.show_once("no-nvcc", "no nvcc found in dice.cudaHome" if settings.cuda_home else
                          "no nvcc found on PATH or in CUDA_HOME; install the CUDA toolkit or set dice.cudaHome")
        return "no nvcc"
    return None


def _start(session: Session, uri: str, serial: int, analysis: Analysis, settings: Settings,
           progress: ProgressReport) -> None:
    """Hand the check to the runner; its stages and its end come back from the check's thread onto the loop."""
    loop = asyncio.get_running_loop()
    watcher = asyncio.ensure_future(until_cancelled(progress, lambda: session.check_runner.cancel(uri)))

    def finished(report: Report) -> None:  # on the check's thread
        if not loop.is_closed():
            loop.call_soon_threadsafe(_finished, session, uri, serial, analysis.text, report, progress, watcher)

    def staged(name: str) -> None:  # on the check's thread: the editor's progress names the stage
        if not loop.is_closed():
            loop.call_soon_threadsafe(progress.report, STAGE_WORDS.get(name, name))

    assert analysis.pairing is not None and analysis.pairing.text is not None  # refusal() said so
    parsed = Parsed(analysis.reference, analysis.anatomy) if analysis.reference is not None else None
    session.check_runner.start(uri, analysis.pairing.text, analysis.text, settings, finished, staged, parsed)


def _finished(session: Session, uri: str, serial: int, text: str, report: Report | None, progress: ProgressReport,
              watcher: asyncio.Future) -> None:
    watcher.cancel()
    doc = session.documents.get(uri)
    current = doc is not None and serial == doc.check_serial
    progress.end(report.summary() if report is not None and current else "replaced by a newer check")
    if doc is None or not current or report is None:
        return  # closed, or a newer save superseded this check: never let old results replace newer ones
    if report.status == "cancelled":
        session.editor.status(ServerStatus("idle", "check cancelled", uri=uri))
        return
    doc.report, doc.report_text = report, text
    if report.status == "built-not-run":
        session.show_once("no-gpu", f"{report.message or 'no CUDA GPU found'}: kernels are built but not run. "
                                    "Checking correctness and speed needs a CUDA GPU.", "warning")
    session.editor.status(ServerStatus("idle", report.summary(), uri=uri, speedup=report.speedup_eager))
    if doc.anatomy is not None:
        session.editor.publish(session.snapshot(uri))
    session.editor.refresh_views()


def nvcc_available(cuda_home: str) -> bool:
    """Whether a build finds nvcc: in `cuda_home` (dice.cudaHome) when it is set, since the build then uses that
    toolkit and no other; else on PATH, in CUDA_HOME or in /usr/local/cuda."""
    if cuda_home:
        return Path(cuda_home, "bin", "nvcc").exists()
    homes = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"]
    return shutil.which("nvcc") is not None or any(home and Path(home, "bin", "nvcc").exists() for home in homes)
