"""Eval over several batches: the next batch builds while this one is checked, fetching kernels never overlaps a
check, and each record says what its sample cost (build, check). C++-only solutions, real builds, on the CPU.
"""

from __future__ import annotations

import threading

from dice_lsp.evaluation import Plan, SolutionFiles, evaluate, find_problems, read_records
from dice_lsp.harness import Options

WAIT = 600.0  # a cap on waiting for a build that must end meanwhile (seconds under load); never reached when it does


class Watcher:
    """The pipeline's events in the order they came, with two holds that make the overlap certain where it exists:
    the next batch's build waits until the first check has started, and that check's end waits until the build
    has ended. A pipeline that built the next batch only after this batch's checks would never release them."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, int]] = []
        self.lock = threading.Lock()
        self.first_check = threading.Event()
        self.next_built = threading.Event()
        self.released: list[bool] = []  # how each hold ended: True when what it waited for came
        self.running = 0  # checks started and not ended

    def __call__(self, event) -> None:
        what = (event.kind, event.batch)
        if what == ("build-start", 1):
            self.released.append(self.first_check.wait(WAIT))
        if what == ("check-end", 0):
            self.released.append(self.next_built.wait(WAIT))
        with self.lock:
            self.events.append((event.kind, event.batch, event.index))
            self.running += {"check-start": 1, "check-end": -1}.get(event.kind, 0)
        if what == ("check-start", 0):
            self.first_check.set()
        if what == ("build-end", 1):
            self.next_built.set()

    def at(self, kind: str, batch: int) -> int:
        return next(i for i, (k, b, _) in enumerate(self.events) if (k, b) == (kind, batch))


class WatchedFiles(SolutionFiles):
    """The solution files, read only while no check runs (as a decoder must generate)."""

    def __init__(self, root, watcher: Watcher) -> None:
        super().__init__(root)
        self.watcher = watcher
        self.running_at_fetch: list[int] = []

    def kernels(self, problem, reference, samples, progress=None):
        with self.watcher.lock:
            self.running_at_fetch.append(self.watcher.running)
        return super().kernels(problem, reference, samples, progress)


def test_next_batch_builds_while_this_one_is_checked_and_records_carry_the_times(build_cache, problem_set,
                                                                                 solutions, tmp_path):
    watcher = Watcher()
    source = WatchedFiles(solutions, watcher)
    options = Options(device="cpu", baseline="none", timing_trials=0, correctness_trials=2)
    plan = Plan(tuple(find_problems(problem_set)), 1, tmp_path / "out", options, batch=1, workers=2, progress=False)
    evaluate(plan, source, {"source": "test"}, on_event=watcher)

    assert watcher.released == [True, True], "the next batch was built only after this batch's checks"
    assert watcher.at("check-start", 0) < watcher.at("build-start", 1) < watcher.at("build-end", 1) \
        < watcher.at("check-end", 0)
    assert source.running_at_fetch == [0, 0, 0], "kernels were fetched while a check ran"
    records = read_records(plan.out)
    assert len(records) == 3
    for record in records.values():
        stages = sum(stage.seconds for stage in record.report.stages)
        assert record.build_s > 0 and record.check_s >= stages - 1e-3 > 0, record
    lines = (plan.out / "samples.jsonl").read_text().splitlines()
    assert all('"build_s": ' in line and '"check_s": ' in line for line in lines)
