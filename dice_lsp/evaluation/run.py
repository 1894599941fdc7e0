"""An evaluation run: for each batch of pending samples, get kernels from the source, check them, append records.

Generating and checking alternate and never overlap, so the decoder never shares the GPU with a timed kernel.
"""

from __future__ import annotations

import json
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator, Sequence

from tqdm import tqdm

from dice_lsp import harness
from dice_lsp.anatomy import parse
from dice_lsp.evaluation import chart, metrics, table
from dice_lsp.evaluation.errors import EvaluationError
from dice_lsp.evaluation.problems import Problem
from dice_lsp.evaluation.records import Key, RecordLog, SampleRecord, read_records
from dice_lsp.evaluation.sources import Kernel, Source
from dice_lsp.harness import Options, Report

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
    batch: int = 16  # samples per harness batch (built in parallel, then checked)
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
    """The harness seam: (kernel, report) from the batch pool as each check ends, so each record is kept at once."""
    try:
        # closing: when eval stops early (an error, Ctrl-C), the checks in progress are cancelled at once
        with closing(harness.check_each([(references[k.problem.key], k.text or "") for k in kernels], options,
                                        workers=workers)) as each:
            for index, report in each:
                yield kernels[index], report
    except harness.HarnessError as error:
        raise EvaluationError(f"the harness cannot check kernels here: {error}") from error


def evaluate(plan: Plan, source: Source, settings: dict) -> Evaluation:
    """Run what is missing from `plan.out`, then write the table and chart over every sample of the plan."""
    references: dict[str, str] = {}
    with RecordLog(plan.out) as log:
        check_settings(plan.out, settings)
        done = read_records(plan.out)
        wanted = plan.keys()
        skipped = sum(1 for key in wanted if key in done)
        bar = progress_bar(len(wanted), skipped, plan.progress)
        # A reference and a solution worker start while the previous check runs; none are left once eval ends.
        try:
            with harness.spares_while(2):
                for group in batches(plan, done):
                    kernels: list[Kernel] = []
                    for problem, samples in group:
                        references.setdefault(problem.key, problem.read())
                        what = f"{source.verb} {problem.key}"
                        bar.set_postfix_str(what, refresh=True)
                        kernels += source.kernels(problem, references[problem.key], samples,
                                                  lambda note, what=what: bar.set_postfix_str(f"{what}: {note}"))
                    for kernel in kernels:
                        if kernel.text is None:
                            log.append(record(kernel, Report("invalid", kernel.note or "no code to check")))
                            bar.update()
                    ready = [k for k in kernels if k.text is not None]
                    if ready:
                        plural = "s" if len(ready) > 1 else ""
                        bar.set_postfix_str(f"checking {len(ready)} sample{plural}", refresh=True)
                        for kernel, report in check(ready, references, plan.options, plan.workers):
                            log.append(record(kernel, with_static_findings(report, kernel, references)))
                            bar.update()
        finally:
            bar.close()
    return summarize(plan, source.description, skipped)


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


def record(kernel: Kernel, report: Report) -> SampleRecord:
    return SampleRecord(kernel.problem.level, kernel.problem.name, kernel.sample, kernel.text or "", report,
                        kernel.source, kernel.note, kernel.seconds)


def with_static_findings(report: Report, kernel: Kernel, references: dict[str, str]) -> Report:
    """The report with anatomy's findings on the kernel, when the harness stopped before it read them."""
    if report.static_findings or not kernel.text:
        return report
    found = parse(kernel.text, references[kernel.problem.key]).findings
    return replace(report, static_findings=tuple(found)) if found else report


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
