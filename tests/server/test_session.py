"""The session without a transport: open, type, save, code actions, generate and infill, driven directly with an
editor that records what the user would see (no pygls, no server process)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dice_lsp import actions
from dice_lsp.anatomy import find_reference, infill_split, parse
from dice_lsp.engine import prompts
from dice_lsp.generation import GenerationCancelled, GenerationError
from dice_lsp.generation_messages import Decoded, Drafted, Loading
from dice_lsp.harness.report import Report
from dice_lsp.session import Session, generate, notifications, state
from dice_lsp.session.checks import benchmark
from dice_lsp.session.editor import Applied

FILES = Path(__file__).parent.parent / "anatomy" / "files"

SERVER_FILES = Path(__file__).parent / "files"
PROBLEM = (SERVER_FILES / "relu.py").read_text()
# Linked to relu.py; its first CUDA source is a real kernel, its second a TODO: Infill fills the second.
TWO_SOURCES = (SERVER_FILES / "two_sources_dice.py").read_text()

RELU_KERNEL = "__global__ void relu_kernel(const float* x, float* y, int n) {}"


@dataclass
class RecordedProgress:
    title: str
    reports: list[str] = field(default_factory=list)
    ended: bool = False
    cancelled: bool = False

    def report(self, message: str) -> None:
        self.reports.append(message)

    def end(self, message: str) -> None:
        self.ended = True


class RecordingEditor:
    """The session's Editor, recording what a user would see."""

    def __init__(self, settings: dict | None = None) -> None:
        self.settings = settings
        self.published, self.cleared, self.shown, self.statuses = [], [], [], []
        self.progresses: list[RecordedProgress] = []
        self.edits: list[tuple[str, int, object, str]] = []
        self.documents: list[str] = []
        self.view_refreshes = 0
        self.changed = asyncio.Condition()

    def publish(self, snapshot) -> None:
        self.published.append(snapshot)
        asyncio.ensure_future(self._notify())

    async def _notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def publication(self, uri: str, version: int):
        """The first snapshot published for `uri` at `version`, once it has been."""
        async with self.changed:
            await self.changed.wait_for(lambda: any(s.uri == uri and s.version == version for s in self.published))
        return next(s for s in self.published if s.uri == uri and s.version == version)

    def clear(self, uri: str) -> None:
        self.cleared.append(uri)

    def show(self, severity: str, message: str) -> None:
        self.shown.append((severity, message))

    def status(self, status) -> None:
        self.statuses.append(status)

    def refresh_views(self) -> None:
        self.view_refreshes += 1

    async def configuration(self):
        return self.settings

    async def progress(self, title: str) -> RecordedProgress:
        self.progresses.append(RecordedProgress(title))
        return self.progresses[-1]

    async def apply(self, uri, version, edit, label) -> Applied:
        self.edits.append((uri, version, edit, label))
        return Applied(True)

    async def show_document(self, uri: str) -> bool:
        self.documents.append(uri)
        return True


class ScriptedEngine:
    """The engine's child, played: it reports loading and a block, then answers with `write(job)` as the kernel."""

    def __init__(self, write=None, error: Exception | None = None) -> None:
        self.write = write or (lambda job: "```python\n" + job.reference + "```")
        self.error = error
        self.jobs = []

    def run(self, job, on_progress, cancelled):
        self.jobs.append(job)
        on_progress(Loading(job.model))
        on_progress(Decoded(blocks=3, tokens=12, seconds=0.5))
        if self.error is not None:
            raise self.error
        code = self.write(job)
        return (Drafted(code, "", code or "", 12, 0.5),)

    def close(self) -> None:
        pass


class ScriptedChecks:
    """The check runner, played: every check passes its stages and finishes at once with `report` (with None, only
    when cancelled)."""

    def __init__(self, report: Report | None) -> None:
        self.report = report
        self.started, self.prepared, self.cancelled, self.parsed = [], [], [], []
        self.running = {}

    def prepare(self, settings) -> None:
        self.prepared.append(settings)

    def start(self, uri, reference, solution, settings, done, on_stage, parsed=None) -> None:
        self.started.append((uri, reference, solution))
        self.parsed.append(parsed)
        on_stage("build")
        if self.report is None:
            self.running[uri] = done
        else:
            on_stage("time")
            done(self.report)

    def cancel(self, uri: str) -> None:
        self.cancelled.append(uri)
        if uri in self.running:
            self.running.pop(uri)(Report(status="cancelled"))

    def close(self) -> None:
        pass


class HeldEngine(ScriptedEngine):
    """The engine's child, played: it decodes until cancelled, then answers as the real child does (a cancel)."""

    def __init__(self) -> None:
        super().__init__()
        self.decoding = threading.Event()
        self.stopped = threading.Event()

    def run(self, job, on_progress, cancelled):
        self.jobs.append(job)
        on_progress(Decoded(blocks=1, tokens=4, seconds=0.1))
        self.decoding.set()
        cancelled.wait()
        self.stopped.set()
        raise GenerationCancelled()


async def session_with(settings: dict | None = None, engine=None, checks=None, options=None
                       ) -> tuple[Session, RecordingEditor]:
    editor = RecordingEditor({"device": "cpu", **(settings or {})})
    session = Session(editor, check_runner=checks or ScriptedChecks(Report(status="correct")),
                      engine=engine or ScriptedEngine(), debounce_s=0.01)
    await notifications.initialized(session, options)
    return session, editor


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return path.as_uri()


async def opened(session: Session, uri: str, text: str, version: int = 1) -> None:
    notifications.open(session, uri, text, version)
    await session.settled()


async def until(predicate) -> None:
    """Until `predicate()` holds, looking again each time the loop has run the callbacks scheduled meanwhile. The
    played parts answer within a few turns of the loop; a fault that keeps it from ever holding (an exception in a
    notification's handler, logged, not raised) fails here after minutes instead of at the suite's 15-minute guard."""
    give_up = time.monotonic() + 300
    while not predicate():
        assert time.monotonic() < give_up, "waited 300 s for a condition that the played parts meet at once"
        await asyncio.sleep(0)


async def test_open_publishes_findings_and_typing_publishes_once_it_settles(tmp_path):
    session, editor = await session_with()
    text = (FILES / "honest_add_with_model.py").read_text()
    uri = write(tmp_path, "solution.py", text)
    await opened(session, uri, text)
    [first] = editor.published
    assert first.version == 1 and first.anatomy.model_new is not None and first.reference_problem is None
    broken = text.replace("return self.elementwise_add.elementwise_add_cuda(a, b)", "return torch.add(a, b)")
    for version in (2, 3, 4):
        notifications.change(session, uri, broken, version)
    settled = await editor.publication(uri, 4)
    assert [s.version for s in editor.published] == [1, 4]  # the text is analysed once typing pauses
    assert "torch-fallback" in {f.code for f in settled.anatomy.findings}
    notifications.close(session, uri)
    assert editor.cleared == [uri] and uri not in session.documents


async def test_a_linked_reference_is_read_off_the_loop_while_other_files_are_answered(tmp_path, monkeypatch):
    """A link may name anything (/dev/stdin, a FIFO, a hung network mount): while its read hangs, other files are
    analysed and published, and the linked file's diagnostics come once it returns."""
    release, readers = threading.Event(), []

    def hung_pairing(anatomy, path):
        if anatomy.reference_link is not None:
            readers.append(threading.current_thread())
            release.wait()
        return find_reference(anatomy, path)

    session, editor = await session_with()
    monkeypatch.setattr(state, "find_reference", hung_pairing)
    write(tmp_path, "relu.py", PROBLEM)
    linked = write(tmp_path, "relu_dice.py", TWO_SOURCES)
    notifications.open(session, linked, TWO_SOURCES, 1)
    other = write(tmp_path, "solution.py", (FILES / "honest_add_with_model.py").read_text())
    notifications.open(session, other, (FILES / "honest_add_with_model.py").read_text(), 1)
    await editor.publication(other, 1)  # answered while the link's read hangs
    assert session.snapshot(linked).anatomy.model_new is not None and [s.uri for s in editor.published] == [other]
    assert readers and readers[0] is not threading.current_thread()
    release.set()
    linked_snapshot = await editor.publication(linked, 1)
    assert linked_snapshot.reference_problem is None and session.documents[linked].pairing.text == PROBLEM


async def test_a_save_checks_the_file_its_progress_ends_with_the_result_and_the_report_lands(tmp_path):
    report = Report(status="correct", speedup_eager=1.5)
    checks = ScriptedChecks(report)
    session, editor = await session_with({"trustedWorkspace": True}, checks=checks)
    write(tmp_path, "relu.py", PROBLEM)
    text = (FILES / "honest_add.py").read_text().replace("import torch", "# dice: reference = relu.py\nimport torch", 1)
    uri = write(tmp_path, "add_dice.py", text)
    await opened(session, uri, text)
    notifications.save(session, uri)
    await session.settled()
    await until(lambda: editor.view_refreshes)  # the finished check comes back on the loop
    [(checked, reference, solution)] = checks.started
    assert checked == uri and reference == PROBLEM and solution == text
    [parsed] = checks.parsed  # the check reads neither file again
    assert parsed.reference.text == PROBLEM and parsed.reference.is_reference
    assert parsed.solution.text == text and parsed.solution.is_solution
    snapshot = session.snapshot(uri)
    assert snapshot.current_report is report and editor.published[-1].current_report is report
    assert [s.state for s in editor.statuses[-2:]] == ["checking", "idle"] and editor.statuses[-1].speedup == 1.5
    [progress] = editor.progresses
    assert progress.title == "Checking add_dice.py" and progress.reports[1:] == ["building", "timing"]
    assert progress.ended
    notifications.change(session, uri, text + "\n", 2)
    await editor.publication(uri, 2)
    assert session.snapshot(uri).current_report is None  # a report is of the text it checked


async def test_cancelling_a_checks_progress_cancels_the_check_and_says_idle(tmp_path):
    checks = ScriptedChecks(None)  # runs until cancelled
    session, editor = await session_with({"trustedWorkspace": True}, checks=checks)
    text = (FILES / "honest_add_with_model.py").read_text()
    uri = write(tmp_path, "solution.py", text)
    await opened(session, uri, text)
    assert (await benchmark(session, uri)).started is True
    [progress] = editor.progresses
    progress.cancelled = True  # the user pressed cancel on the progress
    await until(lambda: checks.cancelled)
    await until(lambda: editor.statuses[-1].state == "idle")
    assert checks.cancelled == [uri] and editor.statuses[-1].message == "check cancelled" and progress.ended


async def test_an_untrusted_workspace_checks_nothing_says_so_once_on_save_and_on_every_benchmark(tmp_path):
    checks = ScriptedChecks(Report(status="correct"))
    session, editor = await session_with(checks=checks)
    text = (FILES / "honest_add_with_model.py").read_text()
    uri = write(tmp_path, "solution.py", text)
    await opened(session, uri, text)
    for _ in range(2):
        notifications.save(session, uri)
    await session.settled()
    assert len([m for m in editor.shown if "not trusted" in m[1]]) == 1
    for clicks in (2, 3):
        started = await benchmark(session, uri)
        assert started.started is False and "not trusted" in started.message
        assert len([m for m in editor.shown if "not trusted" in m[1]]) == clicks  # asked: it explains, each time
    assert checks.started == []


def fake_nvcc(folder: Path) -> Path:
    (folder / "bin").mkdir(parents=True)
    nvcc = folder / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    return folder


async def test_cuda_home_is_the_one_toolkit_a_check_looks_for(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{fake_nvcc(tmp_path / 'on-path') / 'bin'}{os.pathsep}{os.environ['PATH']}")
    text = (FILES / "honest_add_with_model.py").read_text()
    uri = write(tmp_path, "solution.py", text)
    session, editor = await session_with({"trustedWorkspace": True, "cudaHome": str(tmp_path / "no-cuda")})
    await opened(session, uri, text)
    assert (await benchmark(session, uri)).message == "no nvcc"  # nvcc on PATH is not the toolkit the user named
    assert "dice.cudaHome" in editor.shown[-1][1]
    session, _ = await session_with({"trustedWorkspace": True, "cudaHome": str(fake_nvcc(tmp_path / "cuda"))})
    await opened(session, uri, text)
    assert (await benchmark(session, uri)).started is True
    assert "CUDA_HOME" not in os.environ or os.environ["CUDA_HOME"] != str(tmp_path / "cuda")  # no global side effect


async def test_settings_come_from_initialization_options_under_what_the_editor_answers(tmp_path):
    editor = RecordingEditor(None)  # a client that cannot be asked (no workspace/configuration)
    session = Session(editor, check_runner=ScriptedChecks(Report(status="correct")), engine=ScriptedEngine())
    await notifications.initialized(session, {"dice": {"trustedWorkspace": True, "timingTrials": 7, "device": "gpu"}})
    assert session.settings.trusted_workspace is True and session.settings.timing_trials == 7
    assert session.settings.device == "auto"
    [(severity, message)] = editor.shown
    assert severity == "warning" and 'dice.device: expected "auto", "cpu", "cuda" or "cuda:N", got "gpu"' in message
    # A pushed change (the client's didChangeConfiguration carries the section) lands over the options ...
    await notifications.configuration_changed(session, {"dice": {"timingTrials": 9, "device": "gpu"}})
    assert session.settings.timing_trials == 9 and session.settings.trusted_workspace is True
    assert len(editor.shown) == 1  # the same problem is not shown again
    # ... and what the editor answers, when it can be asked, wins key by key.
    editor.settings = {"timingTrials": 11}
    await notifications.configuration_changed(session, None)
    assert (session.settings.timing_trials, session.settings.device) == (11, "auto")


async def test_code_actions_where_they_apply(tmp_path):
    session, _ = await session_with()
    problem = write(tmp_path, "relu.py", PROBLEM)
    await opened(session, problem, PROBLEM)
    offered = actions.offers(session.snapshot(problem).anatomy, PROBLEM.index("class Model"))
    assert [o.command for o in offered] == [actions.GENERATE]
    skeleton = write(tmp_path, "skeleton.py", TWO_SOURCES)
    await opened(session, skeleton, TWO_SOURCES)
    offered = actions.offers(session.snapshot(skeleton).anatomy, TWO_SOURCES.index("class ModelNew"))
    assert [o.title for o in offered] == ["Infill kernel core", "Benchmark now"]


async def test_generate_writes_a_linked_solution_beside_the_problem_and_opens_it(tmp_path):
    session, editor = await session_with({"model": "some-model"})
    uri = write(tmp_path, "relu.py", PROBLEM)
    await opened(session, uri, PROBLEM)
    answer = await generate.solution(session, uri)
    solution = tmp_path / "relu_dice.py"
    assert answer.ok is True and answer.message == f"wrote {solution}"
    assert solution.read_text().startswith("# dice: reference = relu.py\n")  # on disk, not an unsaved buffer
    assert editor.documents == [solution.as_uri()] and editor.edits == []
    [progress] = editor.progresses
    assert progress.reports == ["loading model some-model", "12 tokens, 3 blocks, 24 tok/s"] and progress.ended
    assert [s.state for s in editor.statuses[1:]] == ["generating", "loading-model", "generating", "idle"]
    assert editor.statuses[-1].model == "some-model"
    # Again: the next name, never over the first
    assert (await generate.solution(session, uri)).message == f"wrote {tmp_path / 'relu_dice2.py'}"
    assert solution.read_text().startswith("# dice: reference = relu.py\n")


async def test_a_new_file_is_never_written_over_what_appeared_at_its_name(tmp_path):
    session, editor = await session_with()
    uri = write(tmp_path, "relu.py", PROBLEM)
    # A dangling link: the name looks free (nothing exists there to read) but a file made there would land elsewhere
    (tmp_path / "relu_dice.py").symlink_to(tmp_path / "elsewhere.py")
    answer = await generate.solution(session, uri)
    assert answer.ok is False and "could not write" in answer.message and editor.shown[-1][0] == "error"
    assert not (tmp_path / "elsewhere.py").exists() and editor.documents == []


async def test_infill_fills_the_todo_source_when_the_first_is_a_real_kernel(tmp_path):
    engine = ScriptedEngine(lambda job: prompts.splice(job.skeleton, job.skeleton.replace(
        "// TODO: write the ReLU kernel and its launcher", RELU_KERNEL)))
    session, editor = await session_with(engine=engine)
    write(tmp_path, "relu.py", PROBLEM)
    uri = write(tmp_path, "relu_dice.py", TWO_SOURCES)
    await opened(session, uri, TWO_SOURCES, 7)
    answer = await generate.infill(session, uri)
    assert answer.ok is True, answer
    [job] = engine.jobs
    assert job.skeleton == TWO_SOURCES and job.reference == PROBLEM
    [(edited, version, edit, _)] = editor.edits
    assert edited == uri and version == 7 and isinstance(edit, actions.Replace)
    assert edit.span == infill_split(parse(TWO_SOURCES)).core  # the second source, where the TODO is
    applied = TWO_SOURCES[:edit.span.start] + edit.text + TWO_SOURCES[edit.span.end:]
    assert RELU_KERNEL in applied and "TODO" not in applied and applied.count("scale_kernel") == 1


async def test_an_infill_that_does_not_fit_the_skeleton_is_an_answer_not_an_exception(tmp_path):
    session, editor = await session_with(engine=ScriptedEngine(lambda job: "import torch\n" + job.skeleton))
    write(tmp_path, "relu.py", PROBLEM)
    uri = write(tmp_path, "relu_dice.py", TWO_SOURCES)
    await opened(session, uri, TWO_SOURCES)
    answer = await generate.infill(session, uri)
    assert answer.ok is False and "prefix and suffix" in answer.message
    assert editor.edits == [] and editor.shown[-1][0] == "warning" and "nothing changed" in editor.shown[-1][1]


async def test_infill_without_a_todo_source_says_so(tmp_path):
    session, editor = await session_with()
    uri = write(tmp_path, "relu.py", PROBLEM)
    await opened(session, uri, PROBLEM)
    answer = await generate.infill(session, uri)
    assert answer.ok is False and "TODO CUDA source" in answer.message
    assert editor.shown[-1] == ("warning", answer.message)  # clients drop a command's answer: the user sees it
    skeleton = write(tmp_path, "skeleton.py", TWO_SOURCES)
    await opened(session, skeleton, TWO_SOURCES)
    answer = await generate.solution(session, skeleton)
    assert answer.ok is False and "no `class Model`" in answer.message and editor.shown[-1] == ("warning",
                                                                                                answer.message)


async def test_generation_errors_are_shown_once_and_cancelling_changes_nothing(tmp_path):
    session, editor = await session_with(engine=ScriptedEngine(error=GenerationError("no checkpoint x", "model")))
    uri = write(tmp_path, "relu.py", PROBLEM)
    await opened(session, uri, PROBLEM)
    for _ in range(2):
        answer = await generate.solution(session, uri)
        assert answer.ok is False and answer.message == "no checkpoint x"
    assert [m for m in editor.shown if "no checkpoint x" in m[1]] == [("error", "no checkpoint x")]
    assert editor.statuses[-1].state == "error"
    session.engine = ScriptedEngine(error=GenerationCancelled())
    assert (await generate.solution(session, uri)).message == "cancelled"
    assert editor.statuses[-1].state == "idle" and editor.statuses[-1].message == "generation cancelled"
    assert editor.edits == [] and all(p.ended for p in editor.progresses)


async def decoding(engine: HeldEngine, tmp_path: Path):
    """A session generating for relu.py with `engine`, once decoding is under way: (session, editor, uri, request)."""
    session, editor = await session_with(engine=engine)
    uri = write(tmp_path, "relu.py", PROBLEM)
    await opened(session, uri, PROBLEM)
    request = asyncio.ensure_future(generate.solution(session, uri))
    await asyncio.get_running_loop().run_in_executor(None, engine.decoding.wait)
    return session, editor, uri, request


async def test_a_cancelled_request_stops_decoding_before_it_answers_and_says_idle(tmp_path):
    """$/cancelRequest cancels the command's task: decoding is told to stop, and the request ends (with the
    protocol's cancel) only once the engine has stopped, so nothing decodes on after the answer."""
    engine = HeldEngine()
    session, editor, uri, request = await decoding(engine, tmp_path)
    request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await request
    assert engine.stopped.is_set()  # the engine had stopped when the request ended
    assert (editor.statuses[-1].state, editor.statuses[-1].message) == ("idle", "generation cancelled")
    assert editor.progresses[-1].ended and editor.edits == []


async def test_a_newer_generation_of_the_file_is_not_reported_idle_by_the_one_it_replaced(tmp_path):
    engine = HeldEngine()
    session, editor, uri, first = await decoding(engine, tmp_path)
    engine.decoding.clear()
    second = asyncio.ensure_future(generate.solution(session, uri))  # replaces the first: it is cancelled
    assert (await first).message == "cancelled"
    assert editor.statuses[-1].state == "generating"  # the second still runs: no idle from the first
    await asyncio.get_running_loop().run_in_executor(None, engine.decoding.wait)
    notifications.close(session, uri)  # cancels the second
    assert (await second).message == "cancelled"


async def test_a_model_that_writes_no_code_changes_no_file_of_the_user(tmp_path):
    session, editor = await session_with({"solutionLocation": "sameFile"}, engine=ScriptedEngine(lambda job: None))
    uri = write(tmp_path, "relu.py", PROBLEM)
    await opened(session, uri, PROBLEM)
    answer = await generate.solution(session, uri)
    assert answer.ok is False and "no usable kernel" in answer.message and editor.edits == []


@pytest.mark.parametrize("location", ["sibling", "sameFile"])
async def test_settings_reach_the_engine_job(tmp_path, location):
    engine = ScriptedEngine()
    session, editor = await session_with({"model": "m", "dtype": "float32", "decoding": {"steps": 2},
                                          "solutionLocation": location}, engine=engine)
    uri = write(tmp_path, "relu.py", PROBLEM)
    await opened(session, uri, PROBLEM)
    await generate.solution(session, uri)
    [job] = engine.jobs
    assert (job.model, job.device, job.dtype, job.decoding.steps) == ("m", "cpu", "float32", 2)
    if location == "sameFile":
        [(_, _, edit, _)] = editor.edits
        assert isinstance(edit, actions.Replace)
    else:
        assert editor.edits == [] and editor.documents == [(tmp_path / "relu_dice.py").as_uri()]
