"""The session without a transport: open, type, save, code actions, generate and infill, driven directly with an
editor that records what the user would see (no pygls, no server process)."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dice_lsp import actions
from dice_lsp.anatomy import infill_split, parse
from dice_lsp.engine import prompts
from dice_lsp.generation import GenerationCancelled, GenerationError
from dice_lsp.generation_messages import Decoded, Drafted, Loading
from dice_lsp.harness.report import Report
from dice_lsp.session import Applied, Session

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
        self.lens_refreshes = 0

    def publish(self, snapshot) -> None:
        self.published.append(snapshot)

    def clear(self, uri: str) -> None:
        self.cleared.append(uri)

    def show(self, severity: str, message: str) -> None:
        self.shown.append((severity, message))

    def status(self, status) -> None:
        self.statuses.append(status)

    def refresh_code_lenses(self) -> None:
        self.lens_refreshes += 1

    async def configuration(self):
        return self.settings

    async def progress(self, title: str) -> RecordedProgress:
        self.progresses.append(RecordedProgress(title))
        return self.progresses[-1]

    async def apply(self, uri, version, edit, label) -> Applied:
        self.edits.append((uri, version, edit, label))
        return Applied(True)


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
    """The check runner, played: every check finishes at once with `report`."""

    def __init__(self, report: Report) -> None:
        self.report = report
        self.started, self.prepared, self.cancelled = [], [], []

    def prepare(self, settings) -> None:
        self.prepared.append(settings)

    def start(self, uri, reference, solution, settings, done) -> None:
        self.started.append((uri, reference, solution))
        done(self.report)

    def cancel(self, uri: str) -> None:
        self.cancelled.append(uri)

    def close(self) -> None:
        pass


async def session_with(settings: dict | None = None, engine=None, checks=None) -> tuple[Session, RecordingEditor]:
    editor = RecordingEditor({"device": "cpu", **(settings or {})})
    session = Session(editor, checks=checks or ScriptedChecks(Report(status="correct")),
                      engine=engine or ScriptedEngine(), debounce_s=0.01)
    await session.initialized()
    return session, editor


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return path.as_uri()


async def test_open_publishes_findings_and_typing_publishes_once_it_settles(tmp_path):
    session, editor = await session_with()
    text = (FILES / "honest_add_with_model.py").read_text()
    uri = write(tmp_path, "solution.py", text)
    session.open(uri, text, 1)
    [opened] = editor.published
    assert opened.version == 1 and opened.anatomy.model_new is not None and opened.reference_problem is None
    broken = text.replace("return self.elementwise_add.elementwise_add_cuda(a, b)", "return torch.add(a, b)")
    for version in (2, 3, 4):
        session.change(uri, broken, version)
    assert len(editor.published) == 1  # nothing until typing pauses
    await asyncio.sleep(0.2)
    [_, settled] = editor.published
    assert settled.version == 4 and "torch-fallback" in {f.code for f in settled.anatomy.findings}
    session.close(uri)
    assert editor.cleared == [uri] and uri not in session.documents


async def test_a_save_checks_the_file_and_its_report_lands(tmp_path):
    report = Report(status="correct", speedup_eager=1.5)
    checks = ScriptedChecks(report)
    session, editor = await session_with({"trustedWorkspace": True}, checks=checks)
    write(tmp_path, "relu.py", PROBLEM)
    text = (FILES / "honest_add.py").read_text().replace("import torch", "# dice: reference = relu.py\nimport torch", 1)
    uri = write(tmp_path, "add_dice.py", text)
    session.open(uri, text, 1)
    session.save(uri)
    await asyncio.sleep(0)  # the finished check comes back on the loop
    [(checked, reference, solution)] = checks.started
    assert checked == uri and reference == PROBLEM and solution == text
    snapshot = session.snapshot(uri)
    assert snapshot.current_report is report and editor.published[-1].current_report is report
    assert [s.state for s in editor.statuses[-2:]] == ["checking", "idle"] and editor.statuses[-1].speedup == 1.5
    assert editor.lens_refreshes == 1
    session.change(uri, text + "\n", 2)
    await asyncio.sleep(0.2)
    assert session.snapshot(uri).current_report is None  # a report is of the text it checked


async def test_an_untrusted_workspace_checks_nothing_and_says_so_once(tmp_path):
    checks = ScriptedChecks(Report(status="correct"))
    session, editor = await session_with(checks=checks)
    text = (FILES / "honest_add_with_model.py").read_text()
    uri = write(tmp_path, "solution.py", text)
    session.open(uri, text, 1)
    session.save(uri)
    started = session.benchmark(uri)
    assert started.started is False and "not trusted" in started.message
    assert checks.started == [] and len([m for m in editor.shown if "not trusted" in m[1]]) == 1


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
    session.open(uri, text, 1)
    assert session.benchmark(uri).message == "no nvcc"  # nvcc on PATH is not the toolkit the user named
    assert "dice.cudaHome" in editor.shown[-1][1]
    session, _ = await session_with({"trustedWorkspace": True, "cudaHome": str(fake_nvcc(tmp_path / "cuda"))})
    session.open(uri, text, 1)
    assert session.benchmark(uri).started is True
    assert "CUDA_HOME" not in os.environ or os.environ["CUDA_HOME"] != str(tmp_path / "cuda")  # no global side effect


async def test_code_actions_where_they_apply(tmp_path):
    session, _ = await session_with()
    problem = write(tmp_path, "relu.py", PROBLEM)
    session.open(problem, PROBLEM, 1)
    assert [o.command for o in session.offers(problem, PROBLEM.index("class Model"))] == [actions.GENERATE]
    skeleton = write(tmp_path, "skeleton.py", TWO_SOURCES)
    session.open(skeleton, TWO_SOURCES, 1)
    assert [o.title for o in session.offers(skeleton, TWO_SOURCES.index("class ModelNew"))] == \
        ["Infill kernel core", "Benchmark now"]


async def test_generate_writes_a_linked_solution_beside_the_problem(tmp_path):
    session, editor = await session_with({"model": "some-model"})
    uri = write(tmp_path, "relu.py", PROBLEM)
    session.open(uri, PROBLEM, 1)
    answer = await session.generate(uri, infill=False)
    assert answer.ok is True
    [(_, _, edit, label)] = editor.edits
    assert isinstance(edit, actions.NewFile) and edit.path == tmp_path / "relu_dice.py"
    assert edit.text.startswith("# dice: reference = relu.py\n") and label == "Generating CUDA kernel"
    [progress] = editor.progresses
    assert progress.reports == ["loading model some-model", "12 tokens, 3 blocks, 24 tok/s"] and progress.ended
    assert [s.state for s in editor.statuses[1:]] == ["generating", "loading-model", "generating", "idle"]
    assert editor.statuses[-1].model == "some-model"


async def test_infill_fills_the_todo_source_when_the_first_is_a_real_kernel(tmp_path):
    engine = ScriptedEngine(lambda job: prompts.splice(job.skeleton, job.skeleton.replace(
        "// TODO: write the ReLU kernel and its launcher", RELU_KERNEL)))
    session, editor = await session_with(engine=engine)
    write(tmp_path, "relu.py", PROBLEM)
    uri = write(tmp_path, "relu_dice.py", TWO_SOURCES)
    session.open(uri, TWO_SOURCES, 7)
    answer = await session.generate(uri, infill=True)
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
    session.open(uri, TWO_SOURCES, 1)
    answer = await session.generate(uri, infill=True)
    assert answer.ok is False and "prefix and suffix" in answer.message
    assert editor.edits == [] and editor.shown[-1][0] == "warning" and "nothing changed" in editor.shown[-1][1]


async def test_infill_without_a_todo_source_says_so(tmp_path):
    session, editor = await session_with()
    uri = write(tmp_path, "relu.py", PROBLEM)
    session.open(uri, PROBLEM, 1)
    answer = await session.generate(uri, infill=True)
    assert answer.ok is False and "TODO CUDA source" in answer.message


async def test_generation_errors_are_shown_once_and_cancelling_changes_nothing(tmp_path):
    session, editor = await session_with(engine=ScriptedEngine(error=GenerationError("no checkpoint x", "model")))
    uri = write(tmp_path, "relu.py", PROBLEM)
    session.open(uri, PROBLEM, 1)
    for _ in range(2):
        answer = await session.generate(uri, infill=False)
        assert answer.ok is False and answer.message == "no checkpoint x"
    assert [m for m in editor.shown if "no checkpoint x" in m[1]] == [("error", "no checkpoint x")]
    assert editor.statuses[-1].state == "error"
    session.engine = ScriptedEngine(error=GenerationCancelled())
    assert (await session.generate(uri, infill=False)).message == "cancelled"
    assert editor.edits == [] and all(p.ended for p in editor.progresses)


async def test_a_model_that_writes_no_code_changes_no_file_of_the_user(tmp_path):
    session, editor = await session_with({"solutionLocation": "sameFile"}, engine=ScriptedEngine(lambda job: None))
    uri = write(tmp_path, "relu.py", PROBLEM)
    session.open(uri, PROBLEM, 1)
    answer = await session.generate(uri, infill=False)
    assert answer.ok is False and "no usable kernel" in answer.message and editor.edits == []


@pytest.mark.parametrize("location", ["sibling", "sameFile"])
async def test_settings_reach_the_engine_job(tmp_path, location):
    engine = ScriptedEngine()
    session, editor = await session_with({"model": "m", "dtype": "float32", "decoding": {"steps": 2},
                                          "solutionLocation": location}, engine=engine)
    uri = write(tmp_path, "relu.py", PROBLEM)
    session.open(uri, PROBLEM, 1)
    await session.generate(uri, infill=False)
    [job] = engine.jobs
    assert (job.model, job.device, job.dtype, job.decoding.steps) == ("m", "cpu", "float32", 2)
    [(_, _, edit, _)] = editor.edits
    assert isinstance(edit, actions.Replace if location == "sameFile" else actions.NewFile)
