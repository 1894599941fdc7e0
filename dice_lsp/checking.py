"""Background harness checks for the server: one per file, the newest save wins, the old one is killed.

The harness itself runs candidates in child processes; this only owns the threads that wait for them.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

log = logging.getLogger("dice_lsp")


class CheckRunner:
    def __init__(self) -> None:
        self._running: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._prepared = False

    def prepare(self, settings) -> threading.Thread | None:
        """Once per server, when the first CUDA solution opens on a machine with a GPU: the spares start and the
        precompiled torch header is built in a worker, so the first save's check skips both (a machine's first check
        on the H200 machine: 40-59 s with the header to build, 16-22 s with it). A failure is left to that check."""
        with self._lock:
            if self._prepared:
                return None
            self._prepared = True

        def work() -> None:
            try:
                from dice_lsp import harness
                from dice_lsp.harness import process
                from dice_lsp.harness.batch import visible_gpus
                from dice_lsp.harness.options import Options

                options = Options.from_settings(settings)
                if options.device == "cpu" or not visible_gpus():
                    return
                harness.keep_warm()
                process.fill_spares(options)
                harness.prepare(options)
            except Exception as error:
                log.info("preparing builds ahead of the first check failed: %s", error)

        thread = threading.Thread(target=work, name="dice-prepare", daemon=True)
        thread.start()
        return thread

    def start(self, uri: str, reference: str, solution: str, settings, done: Callable[[object], None]) -> None:
        """Check `solution` against `reference` on a thread; `done(report)` is called with the Report."""
        cancel = threading.Event()
        with self._lock:
            previous = self._running.get(uri)
            if previous is not None:
                previous.set()  # the harness kills that check's worker process tree
            self._running[uri] = cancel

        def work() -> None:
            report = None
            try:
                from dice_lsp import harness
                from dice_lsp.harness.options import Options

                options = Options.from_settings(settings)
                harness.keep_warm()  # started workers wait for the next save: re-checks skip torch's import
                report = harness.check(reference, solution, options, cancel=cancel)
            except Exception as error:  # a harness bug must surface as a report, never kill the server
                log.exception("check failed")
                from dice_lsp.harness.report import Report

                report = Report(status="crashed", message=f"dice-lsp's harness failed: {error}")
            finally:
                with self._lock:
                    if self._running.get(uri) is cancel:
                        del self._running[uri]
            done(report)

        threading.Thread(target=work, name=f"dice-check {uri}", daemon=True).start()

    def cancel(self, uri: str) -> None:
        with self._lock:
            event = self._running.pop(uri, None)
        if event is not None:
            event.set()

    def close(self) -> None:
        self.cancel_all()
        try:
            from dice_lsp import harness

            harness.close_spares()
        except Exception:
            pass

    def cancel_all(self) -> None:
        with self._lock:
            events = list(self._running.values())
            self._running.clear()
        for event in events:
            event.set()
