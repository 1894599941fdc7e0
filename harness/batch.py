"""Batch mode for eval, RL and data curation: build solutions in parallel on all cores and check them, one per
visible GPU at a time (one on CPU), through the same pipeline as single mode.

`check_each` builds a whole batch, then checks it. `Pipeline` overlaps batches: the next batch's builds run while
this one's checks do, so the GPU checks while the compilers work (`dice-lsp eval` over a level of many problems).
"""

from __future__ import annotations

import logging
import os
import queue
import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from typing import Callable, Iterator, Literal, Sequence

from dice_lsp.harness import builder, process
from dice_lsp.harness.errors import HarnessError
from dice_lsp.harness.messages import Build
from dice_lsp.harness.options import Options
from dice_lsp.harness.verdict import Check
from dice_lsp.harness.pool import WorkerPool
from dice_lsp.harness.report import Report

log = logging.getLogger(__name__)


def visible_gpus() -> list[str]:
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d for d in listed.split(",") if d.strip() and d.strip() != "-1"]
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


@dataclass(frozen=True)
class Event:
    """What a pipeline is doing, for a progress line (and for tests of what overlapped): told from the thread that
    does it, so a listener must be quick and thread-safe."""

    kind: Literal["build-start", "build-end", "check-start", "check-end"]
    batch: int  # the batch's number, from 0 in the order submitted
    index: int  # the pair's place in its batch


@dataclass(frozen=True)
class Checked:
    """One pair's report, with what it cost: the check's own build stage is only a cache lookup once prebuilt."""

    index: int
    report: Report
    build_s: float  # building its solution (a worker's start, the compilers, the cache entry); shared by equal texts
    check_s: float  # its check, from taking its workers to its report


def _build(text: str, options: Options, env: dict[str, str], cancel: threading.Event | None = None) -> None:
    """Fill the build cache for one solution in a worker of its own; a failure is left for the check to report,
    exactly as single mode would."""
    cached = options.with_(cache_dir=options.extensions_dir)
    worker = process.Worker(options, env, warm=False)
    try:
        worker.send(Build(path=worker.file("solution.py", text), options=cached))
        builder.serve_builds(worker, cached, options.build_timeout, cancel, extra_env=env)
    except HarnessError:
        pass
    finally:
        worker.close()


def _build_env(cores: int, parallel: int) -> dict[str, str]:
    """ninja's jobs for each of `parallel` builds on `cores`: at least two, so a plain build (two units) compiles
    both at once even when every core has a build of its own: with one, the plain fall-backs at a batch's tail
    compiled their units one after the other while the rest of the cores stood idle."""
    return {"MAX_JOBS": str(max(2, cores // max(1, parallel)))}


def prebuild(solutions: Sequence[str], options: Options, workers: int | None = None) -> None:
    """Fill the build cache for every solution, `workers` builds at a time, sharing the cores between them."""
    solutions = list(dict.fromkeys(solutions))  # RL groups and re-runs repeat texts: build each once
    cores = os.cpu_count() or 1
    parallel = max(1, min(workers or cores, len(solutions) or 1))
    env = _build_env(cores, parallel)
    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(lambda text: _build(text, options, env), solutions))


def prepare(options: Options) -> str:
    """Build the precompiled torch header now, so the first check's light build finds it (a machine's first check on
    the H200 machine: 40-59 s with it to build, 16-22 s without); returns its path. Built by a builder that compiles
    nothing of any candidate's (`builder.prepare_header`). Raises HarnessError when it cannot be built (no CUDA
    toolkit, a compiler error), which the first check reports again."""
    return builder.prepare_header(options)


def check_many(pairs: Sequence[tuple[str, str]], options: Options | None = None, workers: int | None = None,
               gpus: list[str] | None = None, pool: WorkerPool | None = None) -> list[Report]:
    """Reports for (reference, solution) pairs, in order; each equals what `harness.check` gives for the pair."""
    reports = dict(check_each(pairs, options, workers, gpus, pool))
    return [reports[index] for index in range(len(pairs))]


def check_each(pairs: Sequence[tuple[str, str]], options: Options | None = None, workers: int | None = None,
               gpus: list[str] | None = None, pool: WorkerPool | None = None) -> Iterator[tuple[int, Report]]:
    """(index, report) for each pair as its check ends, so a caller can keep each result at once (eval appends
    its record: a run cut short keeps every finished sample). Every solution is built first, in parallel, and only
    then checked, so no compiler competes with a timed run for the cores. Closing the iterator early cancels the
    checks in progress (their workers are killed) and starts no more. `pool`: where the checks' workers come from
    (None: one of the batch's own, closed at its end); it keeps spares for the next checks while the batch runs."""
    options = options or Options()
    prebuild([solution for _, solution in pairs], options, workers)
    built = _Built()
    for index in range(len(pairs)):
        built.add(index)
    own = pool is None
    pool = pool or WorkerPool()
    try:
        with closing(_checks(pairs, built, options, gpus, pool)) as each:
            for checked in each:
                yield checked.index, checked.report
    finally:
        if own:
            pool.close()


class _Built:
    """Which pairs of a batch are built: each check waits for its own pair's build (checks run in the pairs' order,
    as single mode would one after another); `close` releases every wait (the builds were cancelled)."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.done: set[int] = set()
        self.closed = False

    def add(self, index: int) -> None:
        with self.condition:
            self.done.add(index)
            self.condition.notify_all()

    def close(self) -> None:
        with self.condition:
            self.closed = True
            self.condition.notify_all()

    def wait(self, index: int) -> bool:
        """True once pair `index` is built; False when closed first."""
        with self.condition:
            self.condition.wait_for(lambda: index in self.done or self.closed)
            return index in self.done


def _checks(pairs: Sequence[tuple[str, str]], built: _Built, options: Options, gpus: list[str] | None,
            pool: WorkerPool, on_check: Callable[[str, int], None] = lambda kind, index: None) -> Iterator[Checked]:
    """Each pair checked in order once it is built, one check per GPU slot at a time. `on_check("check-start" or
    "check-end", index)` is told on the checking thread. Closing it early cancels the checks in progress and starts
    no more."""
    slots = (gpus if gpus is not None else visible_gpus()) if options.device != "cpu" else []
    done: queue.Queue[Checked | None] = queue.Queue()
    cancel = threading.Event()
    order = iter(range(len(pairs)))
    lock = threading.Lock()

    def take() -> int | None:
        with lock:
            index = None if cancel.is_set() else next(order, None)
        return index if index is not None and built.wait(index) and not cancel.is_set() else None

    def drain(gpu: str | None) -> None:
        env = {"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else {}
        local = options.with_(device="cuda") if gpu is not None and options.device.startswith("cuda:") else options
        try:
            while (index := take()) is not None:
                reference, solution = pairs[index]
                on_check("check-start", index)
                started = time.perf_counter()
                report = Check(reference, solution, local, cancel, env, pool).run()
                seconds = time.perf_counter() - started
                on_check("check-end", index)
                done.put(Checked(index, report, 0.0, seconds))
        finally:
            done.put(None)  # this slot has finished

    threads = [threading.Thread(target=drain, args=(gpu,), daemon=True) for gpu in (slots or [None])]
    # The workers of the next checks start while a check runs: one check ahead, two where the cores allow, since a
    # spare needs longer to warm up (torch, the CUDA context, the profiler's imports) than a warm check takes.
    ahead = 2 if (os.cpu_count() or 1) >= 8 else 1
    with pool.spares_while(2 * ahead):
        for thread in threads:
            thread.start()
        try:
            running = len(threads)
            while running:
                item = done.get()
                if item is None:
                    running -= 1
                else:
                    yield item
        finally:
            cancel.set()
            built.close()  # a slot waiting for a build that will not come
            for thread in threads:
                thread.join()


class _Batch:
    """One submitted batch: its pairs, which of them are built, each build's seconds."""

    def __init__(self, number: int, pairs: Sequence[tuple[str, str]]) -> None:
        self.number = number
        self.pairs = list(pairs)
        self.built = _Built()
        self.build_s: dict[int, float] = {}


class Pipeline:
    """Batches of (reference, solution) pairs, built on all cores while the batch before is checked.

    `submit(pairs)` queues a batch's builds at once (behind those submitted earlier, every core busy across the
    batches' edges); `results(batch)` checks that batch in order, each pair once its build has ended, and yields each
    `Checked` as its check ends. A caller submits the next batch, then takes this one's results: the GPU checks one
    batch while the compilers work on the next, and nothing else of the caller's (a decoder) shares the GPU with a
    check, since submitting runs no code of the candidates'. Closing cancels the builds and checks still running."""

    def __init__(self, options: Options | None = None, workers: int | None = None, gpus: list[str] | None = None,
                 pool: WorkerPool | None = None, on_event: Callable[[Event], None] | None = None) -> None:
        self.options = options or Options()
        self.gpus = gpus
        self.own_pool = pool is None  # closed with the pipeline
        self.pool = pool or WorkerPool()
        self.on_event = on_event or (lambda event: None)
        self.cores = os.cpu_count() or 1
        self.parallel = max(1, workers or self.cores)
        self.builders = ThreadPoolExecutor(self.parallel, thread_name_prefix="dice-build")
        self.cancel = threading.Event()
        self.batches: list[_Batch] = []

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(self, pairs: Sequence[tuple[str, str]]) -> int:
        """Queue the builds of a batch; returns its number for `results`."""
        batch = _Batch(len(self.batches), pairs)
        self.batches.append(batch)
        texts: dict[str, list[int]] = {}
        for index, (_, solution) in enumerate(batch.pairs):
            texts.setdefault(solution, []).append(index)  # RL groups and re-runs repeat texts: build each once
        env = _build_env(self.cores, min(self.parallel, len(texts)))
        for text, indices in texts.items():
            self.builders.submit(self._build, batch, text, indices, env)
        return batch.number

    def _build(self, batch: _Batch, text: str, indices: list[int], env: dict[str, str]) -> None:
        """Build one text of a batch; its pairs are handed to the checks however the build ends (a failed build
        is the check's to report; a cancelled one leaves checks that are cancelled too)."""
        seconds, begun = 0.0, False
        try:
            if not self.cancel.is_set():
                for index in indices:
                    self._tell(Event("build-start", batch.number, index))
                begun, started = True, time.perf_counter()
                _build(text, self.options, env, self.cancel)
                seconds = time.perf_counter() - started
        finally:
            for index in indices:
                batch.build_s[index] = seconds
                batch.built.add(index)
                if begun:  # however it ended: whoever waits for the build's end is told
                    self._tell(Event("build-end", batch.number, index))

    def _tell(self, event: Event) -> None:
        try:
            self.on_event(event)
        except Exception:  # a listener's bug must not end a build or a check
            log.exception("a batch event listener failed")

    def results(self, number: int) -> Iterator[Checked]:
        """Check batch `number` (builds still running keep running), yielding each pair's `Checked` as its check
        ends; closing the iterator early cancels that batch's checks in progress and starts no more."""
        batch = self.batches[number]

        def on_check(kind: str, index: int) -> None:
            self._tell(Event(kind, batch.number, index))  # type: ignore[arg-type]

        with closing(_checks(batch.pairs, batch.built, self.options, self.gpus, self.pool, on_check)) as each:
            for checked in each:
                yield Checked(checked.index, checked.report, batch.build_s.get(checked.index, 0.0), checked.check_s)

    def close(self) -> None:
        """Cancel the builds still running (their workers and compilers are killed) and wait for their threads."""
        self.cancel.set()
        self.builders.shutdown(wait=True, cancel_futures=True)
        for batch in self.batches:  # checks waiting for a build that was cancelled before it began
            batch.built.close()
        if self.own_pool:
            self.pool.close()
