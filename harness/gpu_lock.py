"""One check at a time on a GPU, across every process of the user: the editor's server, a `dice-lsp check` in a
terminal and an eval may all check on the same card. Two checks on one card share out neither its memory (two
real-size checks each planned for the whole card, and both ran out of it: H100, 2026-12-07) nor its time (each
one's timed calls would run beside the other's work). A check takes its card's turn before its reference makes
inputs there and gives it back when it ends; one that finds the card taken waits, saying by whom, as long as the
caller lets it (cancel), up to a limit.

The turn is an exclusive `flock` on a file per card in the user's cache (`folder`): the kernel gives it back when the
process that holds it ends, however it ends. Only checks that use a GPU take one (`limits.uses_gpu`). A reference
worker kept for the next check of its reference holds its memory between checks; that is not counted here.
"""

from __future__ import annotations

import fcntl
import os
import re
import threading
import time
from pathlib import Path
from typing import Callable

from dice_lsp.harness.errors import HarnessError
from dice_lsp.harness.options import default_cache_dir

POLL_S = 0.1


def folder() -> str:
    """Where the turns' files are: the user's dice-lsp cache (DICE_LSP_CACHE, else ~/.cache/dice-lsp), whatever
    cache of builds a check names, so that every check of this user on this machine takes its turn in one place."""
    return str(Path(default_cache_dir()).parent / "gpu")


def card(device: str, env: dict[str, str]) -> str:
    """Which card a check on `device` ("auto", "cuda", "cuda:N") uses, as CUDA_VISIBLE_DEVICES names it (the
    check's own environment first, then this process's): an index or a UUID, made safe for a file name."""
    index = int(device.split(":", 1)[1]) if device.startswith("cuda:") and device[5:].isdigit() else 0
    listed = env.get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    names = [name.strip() for name in listed.split(",") if name.strip()] if listed else []
    name = names[index] if index < len(names) else str(index)
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80] or "0"


class GpuTurn:
    """A card's turn, taken (`take`) and given back (`release`, or when this process ends)."""

    def __init__(self, folder: str, name: str) -> None:
        self.path = Path(folder) / f"gpu-{name}.lock"
        self.name = name
        self.fd: int | None = None

    @property
    def held(self) -> bool:
        return self.fd is not None

    def try_take(self) -> bool:
        """Take the turn if the card is free now; False when another check holds it."""
        if self.fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {time.time():.0f}\n".encode(), 0)
        self.fd = fd
        return True

    def holder(self) -> str:
        """Who holds the turn, as its holder wrote it ("process 1234, for 12 s"); "" when unknown."""
        try:
            pid, since = self.path.read_text().split()[:2]
            return f"process {int(pid)}, for {max(0, time.time() - float(since)):.0f} s"
        except (OSError, ValueError):
            return ""

    def take(self, cancel: threading.Event, timeout: float, on_wait: Callable[[str], None]) -> None:
        """Wait for the turn: `on_wait(who holds it)` once when it must wait; HarnessError when `cancel` is set
        or `timeout` seconds pass first."""
        if self.try_take():
            return
        on_wait(self.holder())
        deadline = time.monotonic() + timeout
        while not self.try_take():
            if cancel.is_set():
                raise HarnessError("cancelled while waiting for the GPU", "cancelled")
            if time.monotonic() >= deadline:
                who = self.holder()
                raise HarnessError(f"GPU {self.name} stayed busy with another check ({who or 'its holder unknown'}) "
                                   f"for {timeout:.0f} s: one check at a time runs on a GPU; check again when it "
                                   "ends", "busy")
            cancel.wait(POLL_S)

    def release(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)  # closing the only descriptor gives the lock back
