"""The workers that outlive a check: warm spares and kept reference workers. Each caller (the server, a CLI
command, a training run) owns its pool; a check without one gets a pool of its own that keeps nothing.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import threading
from dataclasses import dataclass

from dice_lsp.harness import messages
from dice_lsp.harness.options import Options
from dice_lsp.harness.process import Worker, spare_key

ROLES = ("reference", "solution")  # the roles spares are kept for (a builder is started for each build)
KEPT_REFERENCES = 2  # reference workers kept between checks while spares are kept (the files being edited)


def default_spare_count() -> int:
    """Two checks' worth of spares (4) where there are 8 cores or more, else one check's (2). A spare needs ~6 s to
    warm up on the H200 machine (torch, the CUDA context, the profiler's imports); with one check's worth, a save
    within 6 s of the last took half-warm workers (a 5-6 s re-check instead of 0.6 s), and the second pair covers
    that."""
    return 4 if (os.cpu_count() or 1) >= 8 else 2


class WorkerPool:
    """The workers that outlive a check: spares (started, torch imported, waiting for the next check), stopped while
    any timed region runs, and reference workers kept for the next check of the same reference.

    A pool keeps nothing until `keep_warm` (the server) or `spares_while` (batch mode) says how many spares to keep;
    reference workers are kept only while spares are. `default_pool` is the process's; tests and batch callers may
    own another."""

    def __init__(self, kept_references: int = KEPT_REFERENCES) -> None:
        self.spare_count = 0  # spares kept per configuration (`spare_key`)
        self.kept_references = kept_references
        self._lock = threading.Lock()
        self._spares: dict[tuple, list[Worker]] = {}
        self._quiet_depth = 0  # how many timed regions are running now (spares stay stopped while any is)
        self._guards: list[subprocess.Popen] = []  # one per group of stopped spares: continues them if we die
        self._kept: collections.OrderedDict[tuple, KeptReference] = collections.OrderedDict()

    def keep_warm(self, count: int | None = None) -> None:
        """Keep `count` started workers per configuration (None: `default_spare_count()`), so a re-check skips the
        start-up."""
        self.spare_count = default_spare_count() if count is None else count

    def fill(self, options: Options, extra_env: dict[str, str] | None = None) -> None:
        """Start spares for `options` up to the kept count now, rather than at the first check."""
        for role in ROLES:
            key = spare_key(options, extra_env or {}, role)
            with self._lock:
                spares = [w for w in self._spares.get(key, []) if w.process.poll() is None]
                while len(spares) < self._wanted(role):
                    spares.append(self._spare(options, extra_env, role))
                self._spares[key] = spares

    def _wanted(self, role: str) -> int:
        """Spares kept for `role`: a check takes one solution worker, and a reference worker unless one is kept,
        so `spare_count` is checks' worth of each role, at least one while any are kept."""
        return max(1, self.spare_count // 2) if self.spare_count else 0

    @contextlib.contextmanager
    def spares_while(self, count: int):
        """At least `count` warm spares per configuration while the block runs, the caller's setting after: batch
        mode starts the next check's workers while the current check runs, so they are warm when it ends."""
        with self._lock:
            before = self.spare_count
            self.spare_count = max(before, count)
        try:
            yield
        finally:
            with self._lock:
                self.spare_count = before
            if before == 0:
                self.close()

    def start(self, options: Options, extra_env: dict[str, str] | None = None, role: str = "solution") -> Worker:
        """A fresh worker for `role`: a warm spare when one matches, and a new spare started in its place."""
        key = spare_key(options, extra_env or {}, role)
        with self._lock:
            spares = [w for w in self._spares.get(key, []) if w.process.poll() is None]
            worker = spares.pop(0) if spares else None
            while len(spares) < self._wanted(role) - (0 if worker else 1):
                spares.append(self._spare(options, extra_env, role))
            self._spares[key] = spares
        if worker is not None:
            worker.signal(signal.SIGCONT)  # stopped by a timed region that is still running elsewhere
        return worker or Worker(options, extra_env, role=role)

    def _spare(self, options: Options, extra_env: dict[str, str] | None, role: str) -> Worker:
        """A new spare; stopped at once while a timed region runs (called with the lock held)."""
        worker = Worker(options, extra_env, role=role)
        if self._quiet_depth:
            self._stop([worker])
        return worker

    def spares(self, options: Options | None = None, extra_env: dict[str, str] | None = None) -> list[Worker]:
        """The spares kept now: for `options` and `extra_env` (every role's), or every configuration's when options
        is None."""
        with self._lock:
            if options is not None:
                return [w for role in ROLES for w in self._spares.get(spare_key(options, extra_env or {}, role), [])]
            return [w for spares in self._spares.values() for w in spares]

    @contextlib.contextmanager
    def quiet(self):
        """Every spare stopped (SIGSTOP) while the block runs, continued after: a spare warming up (importing torch,
        creating a CUDA context) takes CPU from the timed process, and a kernel's time includes its host's launches.
        On the H200 machine one re-check's eager time came out 2.8x the others' while the next check's spares
        started."""
        with self._lock:
            self._quiet_depth += 1
            if self._quiet_depth == 1:
                self._stop([w for spares in self._spares.values() for w in spares])
        try:
            yield
        finally:
            with self._lock:
                self._quiet_depth -= 1
                if self._quiet_depth == 0:
                    self._continue()

    def _stop(self, workers: list[Worker]) -> None:
        """Stop `workers`, and start a guard that continues them once its stdin closes: when `quiet` ends, or when
        this process dies first. Nothing else would: a worker leads its own session, so its process group is
        orphaned from the start and the kernel's SIGHUP + SIGCONT to newly orphaned groups never comes; it would
        stay stopped, holding its memory and CUDA context, with nobody left to kill it."""
        pids = [str(w.pid) for w in workers if w.process.poll() is None]
        if not pids:
            return
        self._guards.append(subprocess.Popen(
            ["/bin/sh", "-c", 'cat >/dev/null; kill -CONT "$@" 2>/dev/null', "dice-spare-guard", *pids],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        for worker in workers:
            worker.signal(signal.SIGSTOP)

    def _continue(self) -> None:
        for spares in self._spares.values():
            for worker in spares:
                worker.signal(signal.SIGCONT)
        while self._guards:
            guard = self._guards.pop()
            guard.stdin.close()
            try:
                guard.wait(5)
            except subprocess.TimeoutExpired:
                guard.kill()

    def close(self) -> None:
        """Close the spares and the kept reference workers."""
        with self._lock:
            for spares in self._spares.values():
                for worker in spares:
                    worker.close()
            self._spares.clear()
        self.close_references()

    def close_references(self) -> None:
        """Close the kept reference workers (the next check of each reference runs it again)."""
        with self._lock:
            kept = list(self._kept.values())
            self._kept.clear()
        for entry in kept:
            entry.close()

    @property
    def kept(self) -> dict[tuple, KeptReference]:
        """The kept reference workers now, least recently kept first."""
        with self._lock:
            return dict(self._kept)

    def take_reference(self, key: tuple) -> KeptReference | None:
        """The kept reference worker for `key`, now owned by the caller; None when there is none fit to use."""
        with self._lock:
            entry = self._kept.pop(key, None)
        if entry is not None and not entry.usable():
            entry.close()
            return None
        return entry

    def keep_reference(self, key: tuple, entry: KeptReference) -> None:
        """Keep `entry` for the next check of `key` while spares are kept (the server, batch mode); else close it.
        One entry a key: one kept before for the same key (two checks of one reference ran at once: "Save All") is
        closed; past `kept_references`, the least recently kept ones are."""
        evicted = []
        with self._lock:
            if self.spare_count and entry.usable():
                replaced = self._kept.pop(key, None)
                if replaced is not None and replaced is not entry:
                    evicted.append(replaced)
                self._kept[key] = entry
                while len(self._kept) > self.kept_references:
                    evicted.append(self._kept.popitem(last=False)[1])
            else:
                evicted.append(entry)
        for old in evicted:
            old.close()


# The process's own pool; the functions below are its methods, for callers that use no other (the server, the CLI)


@dataclass
class KeptReference:
    """A reference worker that outlives its check: its model and expected outputs (and trial inputs, where they
    fit) stay, so the next check of the same reference skips the reference stage (seconds for large inputs) and,
    with the compile baseline, torch.compile.

    The candidate never runs in this process: its worker makes the same trial inputs itself from their seeds and
    hands its outputs back into `exchange` (or by CUDA IPC). `reply` is the reference stage's answer, None while the
    worker still owes it (a check that ended at a compile error never waited for it)."""

    worker: Worker
    exchange: str
    reply: messages.ReferenceMade | None = None

    def close(self) -> None:
        self.worker.close()
        shutil.rmtree(self.exchange, ignore_errors=True)

    def usable(self) -> bool:
        owes = [] if self.reply is not None else [messages.MakeReference]  # the reference stage's, if anything
        return self.worker.process.poll() is None and list(self.worker.pending) == owes


def reference_key(reference: str, options: Options, extra_env: dict[str, str] | None = None) -> tuple:
    """Same reference text, same options and environment: the same model, inputs and expected outputs."""
    return (hashlib.sha256(reference.encode()).hexdigest(), json.dumps(options.to_dict(), sort_keys=True),
            tuple(sorted((extra_env or {}).items())))
