"""On save: the harness runs in the background and its report lands on the right lines; a newer save wins.

The slow ones build a real C++ extension (CPU mode); the harness tests build the same one, so the session cache
shares it.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
from pathlib import Path

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from dice_lsp.checking import CheckRunner, check_options
from dice_lsp.harness import WorkerPool, batch
from dice_lsp.settings import Settings

HARNESS_FILES = Path(__file__).parent.parent / "harness" / "files"


def solution(forward: str) -> str:
    text = (HARNESS_FILES / "add_solution.py").read_text().replace("return self.ext.FUNCTION(a, b)", forward)
    return text + "\n\n" + (HARNESS_FILES / "add_reference.py").read_text().split("\n", 2)[2]


# The run limit of these checks: far above what any run here needs on a loaded machine (a check that ran past 60 s
# under load was reported as timed out), so only a cancel can end the hung check below.
RUN_TIMEOUT = 3600


async def until(client: LanguageClient, uri: str, predicate):
    """The file's diagnostics once `predicate` holds for them (pytest's timeout ends a wait that never does)."""
    while True:
        current = client.diagnostics.get(uri, [])
        if predicate(current):
            return current
        await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)


def save(client: LanguageClient, uri: str, text: str, version: int) -> None:
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))
    client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(uri)))


async def open_and_save(client: LanguageClient, events, tmp_path: Path, text: str) -> str:
    """Open `text` as a solution file, trust the workspace once the server has read the file, and save it, as a user
    does; its uri, once the server has said the check started."""
    path = tmp_path / "add_dice.py"
    path.write_text(text)
    uri = await events.opened(client, path)
    await events.configure(client, trustedWorkspace=True, device="cpu", baseline="eager", runTimeout=RUN_TIMEOUT)
    client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(uri)))
    await events.status_reached(client, uri, "checking")
    return uri


def headline(diagnostics):
    return [d for d in diagnostics if d.code in ("correct", "mismatch", "crashed", "timed-out", "compile-error")]


@pytest.mark.slow
@pytest.mark.asyncio
async def test_saved_solution_is_checked_and_the_speedup_lands_on_model_new(client: LanguageClient, events,
                                                                           tmp_path):
    text = solution("return self.ext.add_values(a, b)")
    uri = await open_and_save(client, events, tmp_path, text)
    diagnostics = await until(client, uri, lambda ds: headline(ds))
    [result] = headline(diagnostics)
    assert result.code == "correct", result.message
    slow = "x slower" in result.message  # a correct kernel far slower than eager is a warning, else information
    assert result.severity == (types.DiagnosticSeverity.Warning if slow else types.DiagnosticSeverity.Information)
    timed = re.search(r"(\d+) timed trials", result.message)
    assert "x vs eager" in result.message and timed and int(timed.group(1)) >= 20  # the settings' 20, or more
    assert text.splitlines()[result.range.start.line].startswith("class ModelNew")
    lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(uri)))
    assert lenses[0].command.title.startswith("correct:") and lenses[1].command.title == "Benchmark"

    # A wrong kernel: the next save replaces the result.
    save(client, uri, solution("return self.ext.subtract(a, b)"), 2)
    diagnostics = await until(client, uri, lambda ds: any(d.code == "mismatch" for d in ds))
    [result] = headline(diagnostics)
    assert "wrong result on" in result.message and result.severity == types.DiagnosticSeverity.Error


@pytest.mark.slow
@pytest.mark.asyncio
async def test_newer_save_cancels_a_hung_check_and_requests_stay_answered(client: LanguageClient, events, tmp_path):
    uri = await open_and_save(client, events, tmp_path, solution("return self.ext.spin(a, b)"))
    # The check never ends by itself (it spins, and its run limit is an hour): an answer is one given while it runs.
    hover = await client.text_document_hover_async(types.HoverParams(types.TextDocumentIdentifier(uri),
                                                                     types.Position(0, 0)))
    assert hover is None
    save(client, uri, solution("return self.ext.add_values(a, b)"), 2)
    diagnostics = await until(client, uri, lambda ds: headline(ds))
    # Only the newer save's result is shown: the hung check was killed, never reported as a timeout ...
    assert [d.code for d in headline(diagnostics)] == ["correct"]
    # ... and nothing of it still runs: every process the server started settles (spares wait on their stdin).
    assert await settled(client._server.pid), "a process of the server still runs: the hung check was not killed"


def _descendants(root: int) -> dict[int, str]:
    """pid -> state (R running, S sleeping, T stopped, ...) of every process under `root`."""
    parents, states = {}, {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended while we looked
            continue
        pid = int(stat.parent.name)
        states[pid], parents[pid] = fields[0], int(fields[1])
    found, frontier = {}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = states[pid]
                frontier.append(pid)
    return found


async def settled(server: int, polls: int = 600) -> bool:
    """Whether every process under the server stops running: a spare finishes importing torch and then waits on its
    stdin, a spinning kernel runs until killed. Polled (there is no event for a process going to sleep), with a cap
    far above a spare's start on a loaded machine."""
    for _ in range(polls):
        if "R" not in _descendants(server).values():
            return True
        await asyncio.sleep(0.5)
    return False


@pytest.mark.slow
def test_opening_a_cuda_solution_prepares_spares_and_the_header_once(monkeypatch, shared_build_cache):
    """What the server does at the first CUDA file's didOpen, on a GPU machine (the GPU list is the one fake: this
    machine has none): spares start and the precompiled header is built, once per server."""
    if not os.path.exists("/usr/local/cuda/bin/nvcc") and not os.environ.get("CUDA_HOME"):
        pytest.skip("no nvcc")
    monkeypatch.setattr(batch, "visible_gpus", lambda: ["0"])
    pool = WorkerPool()
    runner = CheckRunner(pool)
    try:
        thread = runner.prepare(Settings(device="auto"))
        assert runner.prepare(Settings(device="auto")) is None  # once per server
        thread.join(900)
        assert not thread.is_alive()
        assert list((shared_build_cache / "extensions" / "pch").glob("*/dice_torch.h.gch"))
        started = [w for w in pool.spares() if w.process.poll() is None]
        assert len(started) == pool.spare_count >= 2
    finally:
        runner.close()
    assert not pool.spares()


def test_the_settings_become_the_checks_options_cuda_home_included():
    """dice.cudaHome reaches the harness as an option (the server never writes it into its own environment)."""
    options = check_options(Settings(cuda_home="/opt/cuda-12.4", tolerance=1e-3, baseline="eager", device="cpu"))
    assert (options.cuda_home, options.atol, options.rtol, options.baseline, options.device) == \
        ("/opt/cuda-12.4", 1e-3, 1e-3, "eager", "cpu")
    assert check_options(Settings()).cuda_home == ""


def test_a_newer_start_cancels_the_files_check_and_each_report_reaches_its_caller():
    """Two starts for one file: the first check is cancelled (its report says so), the second one reports; no
    worker is left once the runner closes. Neither gets past parsing here: no reference Model (an invalid report)."""
    pool = WorkerPool()
    runner = CheckRunner(pool)
    reports, arrived = [], threading.Event()

    def done(report) -> None:
        reports.append(report)
        if len(reports) == 2:
            arrived.set()

    hung = solution("__import__('time').sleep(600)")
    runner.start("file:///a.py", (HARNESS_FILES / "add_reference.py").read_text(), hung,
                 Settings(device="cpu", run_timeout=RUN_TIMEOUT), done)
    runner.start("file:///a.py", "x = 1\n", hung, Settings(device="cpu"), done)
    try:
        assert arrived.wait(600)  # a cap for a hang: both come back at once (cancelled, invalid)
        assert sorted(r.status for r in reports) == ["cancelled", "invalid"]
    finally:
        runner.close()
    assert not pool.spares() and not pool.kept
