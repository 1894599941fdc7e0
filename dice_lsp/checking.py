"""Background harness checks for the server: one per file, the newest save wins, the old one is cancelled.

Each check is a `harness.Run` (its thread and workers are the harness's); this keeps one per file and makes the
harness's `Options` from the editor's settings.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from dice_lsp import harness
from dice_lsp.harness import Options, Parsed, Report, WorkerPool, batch
from dice_lsp.settings import Settings

log = logging.getLogger("dice_lsp")


# What the harness's stages (`harness.Run`'s on_stage) do, as a progress line says it (the CLI's and the editor's)
STAGE_WORDS = {"build": "building", "reference": "waiting for the reference's outputs", "run": "running the solution",
               "compare": "comparing outputs", "time": "timing", "inspect": "inspecting what ran",
               "gpu": "waiting for the GPU: another check runs on it"}


def check_options(settings: Settings) -> Options:
    """The harness's options from the editor's `dice.*` settings; the rest stay the harness's defaults."""
    return Options(
        correctness_trials=settings.correctness_trials,
        timing_trials=settings.timing_trials,
        atol=settings.tolerance,
        rtol=settings.tolerance,
        baseline=settings.baseline,
        device=settings.device,
        build_timeout=settings.build_timeout,
        run_timeout=settings.run_timeout,
        cuda_home=settings.cuda_home,
        sandbox=settings.sandbox,
    )


class CheckRunner:
    """The server's checks in flight, one per file; `pool` keeps their workers warm between saves."""

    def __init__(self, pool: WorkerPool | None = None) -> None:
        self.pool = pool or WorkerPool()  # the server's own
        self._running: dict[str, harness.Run] = {}
        self._lock = threading.Lock()
        self._prepared = False

    def prepare(self, settings: Settings) -> threading.Thread | None:
        """Once per server, when the first CUDA solution opens on a machine with a GPU: the spares start and the
        precompiled torch header is built in a worker, so the first save's check skips both (a machine's first check
        on the H200 machine: 40-59 s with the header to build, 16-22 s with it). A failure is left to that check."""
        with self._lock:
            if self._prepared:
                return None
            self._prepared = True

        def work() -> None:
            try:
                options = check_options(settings)
                if options.device == "cpu" or not batch.visible_gpus():
                    return
                self.pool.keep_warm()
                self.pool.fill(options)
                harness.prepare(options)
            except Exception as error:
                log.info("preparing builds ahead of the first check failed: %s", error)

        thread = threading.Thread(target=work, name="dice-prepare", daemon=True)
        thread.start()
        return thread

    def start(self, uri: str, reference: str, solution: str, settings: Settings,
              done: Callable[[Report], None], on_stage: Callable[[str], None] | None = None,
              parsed: Parsed | None = None) -> None:
        """Check `solution` against `reference` in the background, cancelling the file's check before; `done(report)`
        is called on the check's thread with its Report (a "cancelled" one for a check a newer save replaced), and
        `on_stage(name)` there as each stage begins. `parsed`: both files as the session read them."""
        self.pool.keep_warm()  # started workers wait for the next save: re-checks skip torch's import

        def finished(report: Report) -> None:
            with self._lock:
                if self._running.get(uri) is run:
                    del self._running[uri]
            done(report)

        run = harness.Run(reference, solution, check_options(settings), on_done=finished, pool=self.pool,
                          on_stage=on_stage, parsed=parsed)
        with self._lock:
            previous = self._running.get(uri)
            self._running[uri] = run
        if previous is not None:
            previous.cancel()  # its solution's worker tree is killed now
        run.start()

    def cancel(self, uri: str) -> None:
        with self._lock:
            run = self._running.pop(uri, None)
        if run is not None:
            run.cancel()

    def close(self, wait_s: float = 30.0) -> None:
        """Cancel every check, wait (up to `wait_s` each) until its thread has closed its workers, a build's
        compilers included, then close the pool's spares and kept reference workers. In this order: a check that
        ends after the pool closed would hand the pool its reference worker again."""
        self.pool.keep_warm(0)  # nothing (a preparation still filling spares) starts another
        for run in self.cancel_all():
            try:
                run.result(wait_s)
            except harness.HarnessError:
                log.warning("a cancelled check did not end within %.0f s; closing its pool anyway", wait_s)
        try:
            self.pool.close()
        except Exception:  # noqa: BLE001  (shutting down: nothing left to report to)
            log.exception("closing the harness's workers failed")

    def cancel_all(self) -> list[harness.Run]:
        with self._lock:
            runs = list(self._running.values())
            self._running.clear()
        for run in runs:
            run.cancel()
        return runs
