"""Batch mode for eval, RL and data curation: build every solution in parallel on all cores, then check each.

Checks run one per visible GPU at a time (one on CPU), through the same pipeline as single mode.
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator, Sequence

from dice_lsp.harness import process
from dice_lsp.harness.errors import HarnessError
from dice_lsp.harness.messages import Build, Failed, Prepare
from dice_lsp.harness.options import Options
from dice_lsp.harness.pipeline import _Check
from dice_lsp.harness.process import WorkerPool
from dice_lsp.harness.report import Report


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


def prebuild(solutions: Sequence[str], options: Options, workers: int | None = None) -> None:
    """Fill the build cache for every solution, `workers` builds at a time, sharing the cores between them."""
    solutions = list(dict.fromkeys(solutions))  # RL groups and re-runs repeat texts: build each once
    cores = os.cpu_count() or 1
    parallel = max(1, min(workers or cores, len(solutions) or 1))
    env = {"MAX_JOBS": str(max(1, cores // parallel))}
    cached = options.with_(cache_dir=options.extensions_dir)

    def build(text: str) -> None:
        worker = process.Worker(options, env, warm=False)
        try:
            worker.send(Build(path=worker.file("solution.py", text), options=cached))
            process.serve_builds(worker, cached, options.build_timeout, extra_env=env)
        except HarnessError:
            pass  # the check that follows reports it, exactly as single mode would
        finally:
            worker.close()

    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(build, solutions))


def prepare(options: Options) -> str:
    """Build the precompiled torch header in a worker now, so the first check's light build finds it (a machine's
    first check on the H200 machine: 40-59 s with it to build, 16-22 s without); returns its path. Raises
    HarnessError when it cannot be built (no CUDA toolkit, a compiler error), which the first check reports again."""
    root = Path(options.extensions_dir)
    for name in ("pch", "prepare"):
        (root / name).mkdir(parents=True, exist_ok=True)
    # A builder: it writes the shared header and runs no code of any candidate's
    worker = process.Worker(options, warm=False, role="builder", writable=(str(root / "pch"), str(root / "prepare")))
    try:
        answer = worker.call(Prepare(cache_dir=options.extensions_dir), options.build_timeout)
    finally:
        worker.close()
    if isinstance(answer, Failed):
        raise HarnessError(f"could not build the precompiled torch header: {answer.error}", "setup")
    return answer.header


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
    (None: `process.default_pool`); it keeps spares for the next checks while the batch runs."""
    options = options or Options()
    pool = pool or process.default_pool
    prebuild([solution for _, solution in pairs], options, workers)
    slots = (gpus if gpus is not None else visible_gpus()) if options.device != "cpu" else []
    todo: queue.Queue[int] = queue.Queue()
    for index in range(len(pairs)):
        todo.put(index)
    done: queue.Queue[tuple[int, Report] | None] = queue.Queue()
    cancel = threading.Event()

    def drain(gpu: str | None) -> None:
        env = {"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else {}
        local = options.with_(device="cuda") if gpu is not None and options.device.startswith("cuda:") else options
        try:
            while not cancel.is_set():
                try:
                    index = todo.get_nowait()
                except queue.Empty:
                    return
                reference, solution = pairs[index]
                done.put((index, _Check(reference, solution, local, cancel, env, pool).run()))
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
            for thread in threads:
                thread.join()
