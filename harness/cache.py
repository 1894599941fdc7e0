"""The persistent build cache: one directory per extension content, written only by a trusted builder.

Each entry holds `dice.done`: the build's mode, its library's path and the library's SHA-256, written last (by a
rename, so a reader sees all of it or nothing) and checked before the library is loaded. Builds of one entry are
serialised by `BuildLock`, an flock on `<dir>/dice.lock` that the kernel releases when its holder dies, across PID
namespaces too (the builders run in sandboxes). torch's own FileBaton, `<dir>/plain/lock` for our plain builds, has
no owner: a build killed while holding it would block every later build of the same source, so whoever holds our
lock removes it.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import filelock

OWN_LOCK = "dice.lock"
DONE = "dice.done"
# Where torch's FileBaton lock lies in an entry: load_inline's build_directory is `<entry>/plain` (build.Builder),
# and the baton is `<build_directory>/lock`
TORCH_LOCKS = ("plain/lock", "light/probe/lock")


def content_key(parts: dict[str, Any]) -> str:
    """A short, stable hash of everything that decides what a build produces."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


def digest(path: str | os.PathLike[str]) -> str:
    hashed = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            hashed.update(block)
    return hashed.hexdigest()


@dataclass(frozen=True)
class Done:
    """A finished entry: how it was built, its library and the library's SHA-256."""

    mode: str
    library: str
    sha256: str


def read_done(directory: str | os.PathLike[str]) -> Done | None:
    """The entry's record when its library exists and still has the recorded hash; None otherwise (not built, or
    changed since: never loaded then)."""
    try:
        mode, library, sha = (Path(directory) / DONE).read_text().split("\n")[:3]
        return Done(mode, library, sha) if digest(library) == sha else None
    except (OSError, ValueError):
        return None


def write_done(directory: str | os.PathLike[str], mode: str, library: str) -> Done:
    done = Done(mode, library, digest(library))
    partial = Path(directory) / f"{DONE}.{os.getpid()}"
    partial.write_text(f"{done.mode}\n{done.library}\n{done.sha256}\n")
    partial.rename(Path(directory) / DONE)
    return done


class BuildLock:
    """An exclusive lock on one build directory (a build, or the precompiled header's); torch's lock left inside
    by a build that died is removed once it is ours."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / OWN_LOCK
        self._lock = filelock.FileLock(str(self.path))

    def acquire(self, timeout: float | None = None) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire(timeout=-1 if timeout is None else timeout)
        except filelock.Timeout:
            raise TimeoutError(f"build directory {self.directory} stayed locked for {timeout:.0f} s") from None
        for name in TORCH_LOCKS:  # nobody else builds here now: a torch lock left here belongs to a dead build
            _remove(self.directory / name)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> BuildLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def clean_stale_locks(root: str | os.PathLike[str]) -> list[Path]:
    """Remove torch's locks under `root` that no live build holds (our lock is free); returns their entries."""
    removed = []
    root = Path(root)
    if not root.is_dir():
        return removed
    for name in TORCH_LOCKS:
        for lock in root.glob(f"*/{name}"):
            entry = lock.parents[len(Path(name).parts) - 1]
            held = filelock.FileLock(str(entry / OWN_LOCK))
            try:
                held.acquire(timeout=0)
            except (filelock.Timeout, OSError):
                continue  # a build is running there, or the entry is not ours to lock
            try:
                _remove(lock)
                removed.append(entry)
            finally:
                held.release()
    return removed


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
