"""The limits rlimits cannot give a worker and everything it starts: a process count (RLIMIT_NPROC counts every
process of the user, and is not enforced at all for root) and one memory cap for the whole tree (RLIMIT_AS is per
process: three children of 2 GiB each took 6 GB, and a CUDA context reserves terabytes of addresses).

A cgroup per worker, made only where the caller may (root, or a delegated hierarchy): under the caller's own cgroup
where it can be (so the caller's own limits still bound its workers; cgroup v1, or v2 where the caller's cgroup may
have children with controllers), else at the hierarchy's root. `applied` says which limits hold; `close` removes it
once its processes are gone, and whatever could not be removed yet is tried again at exit.
"""

from __future__ import annotations

import atexit
import itertools
import os
import threading
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PREFIX = "dice-lsp-"
_names = itertools.count()
_left: set[Path] = set()  # made, not removed yet: retried at exit
_left_lock = threading.Lock()


def _own(controller: str) -> str:
    """This process's cgroup in the v1 hierarchy of `controller` ("" for v2's), from /proc/self/cgroup."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _number, controllers, path = line.split(":", 2)
            if controller in controllers.split(","):
                return path.lstrip("/")
    except (OSError, ValueError):
        pass
    return ""


def version() -> int:
    return 2 if (ROOT / "cgroup.controllers").exists() else 1


class Cgroup:
    """A cgroup for one worker and everything it starts: `pids` caps its processes and threads, `memory` all their
    memory together (where the kernel has the controller and lets the caller use it)."""

    def __init__(self, processes: int, memory_bytes: int = 0) -> None:
        self.paths: list[Path] = []
        self.applied: list[str] = []
        self.memory = 0  # the memory cap that holds, in bytes (0: none)
        name = f"{PREFIX}{os.getpid()}-{next(_names)}"
        if version() == 2:
            knobs = {"pids.max": processes, "memory.max": memory_bytes, "memory.swap.max": 0 if memory_bytes else -1}
            for parent in dict.fromkeys((ROOT / _own(""), ROOT)):
                if self._make(parent / name, {k: v for k, v in knobs.items() if v >= 0}):
                    break
        else:
            for controller, knobs in (("pids", {"pids.max": processes}),
                                      ("memory", {"memory.limit_in_bytes": memory_bytes,
                                                  "memory.memsw.limit_in_bytes": memory_bytes})):
                if any(knobs.values()):
                    for parent in dict.fromkeys((ROOT / controller / _own(controller), ROOT / controller)):
                        if self._make(parent / name, knobs):
                            break

    def _make(self, path: Path, knobs: dict[str, int]) -> bool:
        """Make `path` with `knobs` set; False (and nothing left) when its first knob cannot be set there (no such
        controller enabled for that parent, or none at all)."""
        try:
            path.mkdir()
        except OSError:
            return False
        with _left_lock:
            _left.add(path)
        for index, (knob, value) in enumerate(knobs.items()):
            try:
                (path / knob).write_text(str(value))
            except OSError:
                if index == 0:
                    _remove(path)
                    return False
                continue  # an optional knob (swap) this kernel does not have
            kind = knob.split(".")[0]
            if kind == "memory" and not self.memory:
                self.memory = value
            if not any(a.startswith(kind) for a in self.applied):
                self.applied.append(f"{kind} {value}")
        self.paths.append(path)
        return True

    def add(self, pid: int) -> None:
        """Move `pid` in; its children follow. Before it runs any code of the candidate's."""
        for path in self.paths:
            try:
                (path / "cgroup.procs").write_text(str(pid))
            except OSError:
                pass

    def out_of_memory(self) -> bool:
        """Whether the kernel ended a process here because the memory cap was reached (read before `close`)."""
        for path in self.paths:
            for name in ("memory.events", "memory.oom_control"):
                try:
                    for line in (path / name).read_text().splitlines():
                        key, _, value = line.partition(" ")
                        if key == "oom_kill" and int(value) > 0:
                            return True
                except (OSError, ValueError):
                    continue
        return False

    def close(self, wait: float = 10.0) -> None:
        """Remove the cgroups once the processes in them are gone: a cgroup cannot be removed while a process (a
        zombie not yet reaped included) is in it, so each is tried again until `wait` seconds have passed; one
        still busy is left to the exit's last try."""
        deadline = time.monotonic() + wait
        for path in self.paths:
            while not _remove(path) and time.monotonic() < deadline:
                time.sleep(0.02)


def _remove(path: Path) -> bool:
    """Remove one cgroup; True when it is gone."""
    try:
        path.rmdir()
    except FileNotFoundError:
        pass
    except OSError:  # busy (a process, or a zombie not yet reaped, is still in it), or not ours to remove
        return False
    with _left_lock:
        _left.discard(path)
    return True


@atexit.register
def _remove_left() -> None:
    for path in list(_left):
        deadline = time.monotonic() + 5
        while not _remove(path) and time.monotonic() < deadline:
            time.sleep(0.05)


def leftovers(pid: int) -> list[Path]:
    """The cgroups process `pid` made that are still there, in every hierarchy (for tests and checks)."""
    found = []
    for hierarchy in ([ROOT] if version() == 2 else [p for p in ROOT.iterdir() if p.is_dir()]):
        found += hierarchy.rglob(f"{PREFIX}{pid}-*")
    return sorted(found)
