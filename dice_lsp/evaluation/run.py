"""An evaluation run: for each batch of pending samples, get kernels from the source, build and check them, append
records.

The next batch's kernels are fetched and built while this batch is checked: builds use the cores while checks use the
GPU. Fetching (a decoder, for generated kernels) and checking never overlap, so the decoder never shares the GPU with
a timed kernel.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

from tqdm import tqdm

from dice_lsp import harness
from dice_lsp.evaluation import chart, metrics, table
from dice_lsp.evaluation.errors import EvaluationError
from dice_lsp.evaluation.problems import Problem
from dice_lsp.evaluation.records import Key, RecordLog, SampleRecord, read_records
from dice_lsp.evaluation.sources import Kernel, Source
from dice_lsp.harness import Options, Report
from dice_lsp.harness.batch import Checked, Event, Pipeline

SETTINGS_FILE = "run.json"
# Options that change what a record says; a resumed run must use the same ones. Time limits and caches may change.
_RESULT_OPTIONS = ("correctness_trials", "timing_trials", "warmup_trials", "timing_budget_s", "timing_rounds",
                   "warmup_s", "atol", "rtol", "seed", "baseline", "tf32", "cudnn_tf32", "device", "light_build")


@dataclass(frozen=True)
class Plan:
    problems: tuple[Problem, ...]
    samples: int  # per problem
    out: Path
    options: Options
    baseline: metrics.Baseline = "eager"  # which speedup fast_p and the geomean use
    batch: int = 16  # samples per harness batch (built in parallel while the batch before is checked)
    workers: int | None = None  # parallel builds; None: one per core
    progress: bool = True

    def keys(self) -> list[Key]:
        return [(p.level, p.name, s) for p in self.problems for s in range(self.samples)]


@dataclass(frozen=True)
class Evaluation:
    records: tuple[SampleRecord, ...]
    scores: tuple[metrics.Score, ...]
    table: Path
    chart: Path
    skipped: int  # samples already finished by an earlier run


def check(kernels: Sequence[Kernel], references: dict[str, str], options: Options,
          workers: int | None) -> Iterator[tuple[Kernel, Report]]:
    """One batch alone (built, then checked): (kernel, report) as each check ends."""
    with Pipeline(options, workers) as pipeline:
        for kernel, checked in results(pipeline, submit(pipeline, kernels, references), kernels):
            yield kernel, checked.report


def submit(pipeline: Pipeline, kernels: Sequence[Kernel], references: dict[str, str]) -> int:
    """The harness seam, first half: queue the kernels' builds; returns the batch's number."""
    return pipeline.submit([(references[k.problem.key], k.text or "") for k in kernels])


def results(pipeline: Pipeline, number: int, kernels: Sequence[Kernel]) -> Iterator[tuple[Kernel, Checked]]:
    """The harness seam, second half: (kernel, checked) as each check of batch `number` ends, so each record is
    kept at once."""
    try:
        # closing: when eval stops early (an error, Ctrl-C), the checks in progress are cancelled at once
        with closing(pipeline.results(number)) as each:
            for checked in each:
                yield kernels[checked.index], checked
    except harness.HarnessError as error:
        raise EvaluationError(f"the harness cannot check kernels here: {error}") from error


def evaluate(plan: Plan, source: Source, settings: dict, on_event: Callable[[Event], None] | None = None) -> Evaluation:
    """Run what is missing from `plan.out`, then write the table and chart over every sample of the plan.
    `on_event`: told each build's and check's start and end (from the harness's threads), besides the bar."""
    references: dict[str, str] = {}
    with RecordLog(plan.out) as log:
        check_settings(plan.out, settings)
        done = read_records(plan.out)
        wanted = plan.keys()
        skipped = sum(1 for key in wanted if key in done)
        bar = ProgressBar(progress_bar(len(wanted), skipped, plan.progress), on_event)
        # A reference and a solution worker start while the previous check runs; none are left once eval ends. A
        # reference worker is kept only for the next sample of its problem: another problem's check never comes
        # back to it, and one of a big problem holds its trials' inputs and outputs.
        pool = harness.WorkerPool(kept_references=1 if plan.samples > 1 else 0)
        try:
            with pool.spares_while(2), Pipeline(plan.options, plan.workers, pool=pool, on_event=bar.event) as pipeline:
                waiting: deque[tuple[int, list[Kernel]]] = deque()
                for group in batches(plan, done):
                    ready = fetch(group, source, references, log, bar)
                    if ready:
                        number = submit(pipeline, ready, references)
                        bar.queued(number, ready)
                        waiting.append((number, ready))
                    if len(waiting) > 1:  # the batch just submitted builds while this one is checked
                        record_checks(pipeline, *waiting.popleft(), log, bar)
                while waiting:
                    record_checks(pipeline, *waiting.popleft(), log, bar)
        finally:
            bar.close()
    return summarize(plan, source.description, skipped)


def fetch(group: list[tuple[Problem, list[int]]], source: Source, references: dict[str, str], log: RecordLog,
          bar: ProgressBar) -> list[Kernel]:
    """The group's kernels from the source; those without code are recorded at once, the rest returned."""
    kernels: list[Kernel] = []
    for problem, samples in group:
        references.setdefault(problem.key, problem.read())
        what = f"{source.verb} {problem.key}"
        bar.note(what)
        kernels += source.kernels(problem, references[problem.key], samples,
                                  lambda note, what=what: bar.note(f"{what}: {note}"))
    for kernel in kernels:
        if kernel.text is None:
            log.append(record(kernel, Report("invalid", kernel.note or "no code to check")))
            bar.advance()
    return [k for k in kernels if k.text is not None]


def record_checks(pipeline: Pipeline, number: int, kernels: list[Kernel], log: RecordLog, bar: ProgressBar) -> None:
    for kernel, checked in results(pipeline, number, kernels):
        log.append(record(kernel, checked.report, checked))  # the report holds the kernel's static findings too
        bar.advance()


class ProgressBar:
    """The bar, with what is happening after it ("12/32 built, checking level1/3_x#0"): builds and checks are told
    from the harness's threads, so what it shows is changed under a lock."""

    def __init__(self, bar: tqdm, listener: Callable[[Event], None] | None = None) -> None:
        self.bar, self.listener = bar, listener
        self.lock = threading.Lock()
        self.kernels: dict[int, list[Kernel]] = {}  # by batch number
        self.built = 0
        self.doing = ""

    def queued(self, number: int, kernels: list[Kernel]) -> None:
        with self.lock:
            self.kernels[number] = kernels
            self._show()

    def event(self, event: Event) -> None:
        if self.listener is not None:
            self.listener(event)
        with self.lock:
            if event.kind == "build-end":
                self.built += 1
            elif event.kind == "check-start":
                kernel = self.kernels[event.batch][event.index]
                self.doing = f"checking {kernel.problem.key}#{kernel.sample}"
            self._show()

    def note(self, what: str) -> None:
        with self.lock:
            self.doing = what
            self._show()

    def _show(self) -> None:
        queued = sum(len(k) for k in self.kernels.values())
        self.bar.set_postfix_str(", ".join(([f"{self.built}/{queued} built"] if queued else []) +
                                           ([self.doing] if self.doing else [])), refresh=True)

    def advance(self) -> None:
        with self.lock:
            self.bar.update()

    def close(self) -> None:
        self.bar.close()


def summarize(plan: Plan, title: str, skipped: int = 0) -> Evaluation:
    """Scores, table and chart over the plan's samples as recorded in `plan.out`."""
    done = read_records(plan.out)
    records = tuple(done[key] for key in plan.keys() if key in done)
    scores = tuple(metrics.score_levels(records, plan.baseline))
    heading = f"dice-lsp eval: {title}"
    table_path = plan.out / "table.md"
    table_path.write_text(table.render(heading, scores, metrics.statuses(records), plan.samples, plan.baseline))
    chart_path = chart.draw(scores, plan.out / "chart.png", heading)
    return Evaluation(records, scores, table_path, chart_path, skipped)


def batches(plan: Plan, done: dict[Key, SampleRecord]) -> Iterator[list[tuple[Problem, list[int]]]]:
    """Pending samples grouped by problem, whole problems per batch, about `plan.batch` samples each."""
    group: list[tuple[Problem, list[int]]] = []
    size = 0
    for problem in plan.problems:
        samples = [s for s in range(plan.samples) if (problem.level, problem.name, s) not in done]
        if not samples:
            continue
        group.append((problem, samples))
        size += len(samples)
        if size >= plan.batch:
            yield group
            group, size = [], 0
    if group:
        yield group


def record(kernel: Kernel, report: Report, checked: Checked | None = None) -> SampleRecord:
    return SampleRecord(kernel.problem.level, kernel.problem.name, kernel.sample, kernel.text or "", report,
                        kernel.source, kernel.note, kernel.seconds, checked.build_s if checked else 0.0,
                        checked.check_s if checked else 0.0)


def check_settings(out: Path, settings: dict) -> None:
    """Record the run's settings in `out`, or refuse to resume records made with different ones."""
    path = out / SETTINGS_FILE
    if path.is_file():
        try:
            before = json.loads(path.read_text())
        except ValueError:
            before = None
        if isinstance(before, dict) and before != settings:
            changed = sorted(k for k in set(before) | set(settings) if before.get(k) != settings.get(k))
            what = changed[0]
            raise EvaluationError(
                f"{out} holds samples made with other settings ({what}: {before.get(what)!r}, now "
                f"{settings.get(what)!r}); give another --out or remove {out} to start again")
    path.write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")


def result_settings(source: str, options: Options, decoding: dict | None = None) -> dict:
    """The settings that decide what a record says, flat ("options.atol": 0.01), as stored in `run.json`."""
    raw = options.to_dict()
    out: dict = {"source": source, **{f"options.{k}": raw[k] for k in _RESULT_OPTIONS}}
    for name, value in (decoding or {}).items():
        out[f"decoding.{name}"] = value
    return out


def progress_bar(total: int, done: int, enabled: bool) -> tqdm:
    """A bar on stderr when it is a terminal (tqdm's `disable=None`): a log file gets no stream of redraws."""
    return tqdm(total=total, initial=done, unit="sample", desc="eval", disable=None if enabled else True,
                dynamic_ncols=True, smoothing=0.1)
