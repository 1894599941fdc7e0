"""The persistent build cache: one directory per extension content, guarded by a lock whose owner is known.

torch's own FileBaton (`<dir>/lock`) has no owner, so a killed build would block every later one; we hold our own
lock (`<dir>/dice.lock`, holding the owner's pid) around each build and delete torch's lock when its owner is dead.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

TORCH_LOCK = "lock"
OWN_LOCK = "dice.lock"


def content_key(parts: dict[str, Any]) -> str:
    """A short, stable hash of everything that decides what a build produces."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner(lock: Path) -> int | None:
    try:
        return int(lock.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class BuildLock:
    """An exclusive lock on one build directory; a lock whose owning process died is taken over."""

    def __init__(self, directory: str | os.PathLike[str], poll: float = 0.1) -> None:
        self.directory = Path(directory)
        self.path = self.directory / OWN_LOCK
        self.poll = poll

    def acquire(self, timeout: float | None = None) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                owner = _owner(self.path)
                if owner is None and _age(self.path) > 5.0 or owner is not None and not alive(owner):
                    _remove(self.path)
                    continue
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"build directory {self.directory} stayed locked by process {owner}")
                time.sleep(self.poll)
                continue
            with os.fdopen(fd, "w") as handle:
                handle.write(f"{os.getpid()}\n")
            break
        # We own the directory now: a torch lock left here can only belong to a build that died.
        _remove(self.directory / TORCH_LOCK)

    def release(self) -> None:
        if _owner(self.path) == os.getpid():
            _remove(self.path)

    def __enter__(self) -> BuildLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def clean_stale_locks(root: str | os.PathLike[str], dead: int | None = None) -> list[Path]:
    """Remove locks under `root` whose owner is dead (or is `dead`); returns what was removed."""
    removed = []
    root = Path(root)
    if not root.is_dir():
        return removed
    for lock in root.glob(f"*/{OWN_LOCK}"):
        owner = _owner(lock)
        if owner is not None and (owner == dead or not alive(owner)):
            _remove(lock.parent / TORCH_LOCK)
            _remove(lock)
            removed.append(lock.parent)
    return removed


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return 0.0


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
