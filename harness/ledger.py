"""How checks on one machine share a device's memory: each reserves what its plan holds at once (`memory.Plan.total`)
in a ledger every dice-lsp process shares, and waits while the other checks' reservations leave it too little.

The ledger is a small JSON file beside the build cache, read and written under an flock of its own. An entry names the
process that made it (its PID and start time, so a reused PID is not taken for it), the device (a GPU's UUID, or
"host"), the check and its bytes; an entry whose process has ended is dropped by the next reader. It counts only
dice's checks: other processes on the GPU are not in it (`memory.GPU_SHARE` leaves them a margin).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator

FILE = "memory-ledger.json"
POLL_S = 0.25  # how often a waiting check reads the ledger again


@dataclass(frozen=True)
class Entry:
    pid: int
    started: str  # the process's start time (clock ticks after boot, /proc/PID/stat): a reused PID has another
    device: str
    check: str
    bytes: int


def started(pid: int) -> str:
    """The start time of process `pid`, "" when it has ended (or is a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return ""
    return fields[19] if len(fields) > 19 and fields[0] not in ("Z", "X") else ""


def alive(entry: Entry) -> bool:
    return bool(entry.started) and started(entry.pid) == entry.started


class Ledger:
    """The ledger at `path` (`ledger_path(options)` for a check's)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.lock = self.path.with_name(self.path.name + ".lock")
        self.pid = os.getpid()
        self.started = started(self.pid)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.lock, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when this process dies
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self) -> list[Entry]:
        """The live entries (a missing or unreadable file holds none)."""
        try:
            raw = json.loads(self.path.read_text())
            entries = [Entry(**item) for item in raw.get("entries", [])]
        except (OSError, ValueError, TypeError, AttributeError):
            return []
        return [e for e in entries if alive(e)]

    def _write(self, entries: list[Entry]) -> None:
        partial = self.path.with_name(f"{self.path.name}.{self.pid}.{threading.get_ident()}")
        partial.write_text(json.dumps({"entries": [asdict(e) for e in entries]}, indent=1))
        partial.replace(self.path)

    def entries(self) -> list[Entry]:
        with self._locked():
            return self._read()

    def held(self, device: str, besides: str = "") -> int:
        """Bytes the live checks other than `besides` hold on `device`."""
        return sum(e.bytes for e in self.entries() if e.device == device and e.check != besides)

    def try_reserve(self, device: str, check: str, amount: int, capacity: int) -> int | None:
        """Reserve `amount` bytes of `device` for `check` (replacing what it held) when the other checks' entries
        leave room under `capacity`: None then; else the bytes the others hold, and the check keeps what it held."""
        with self._locked():
            entries = self._read()
            others = [e for e in entries if not (e.device == device and e.check == check)]
            held = sum(e.bytes for e in others if e.device == device)
            if held + amount > capacity:
                self._write(entries)  # the dead ones dropped all the same
                return held
            self._write(others + [Entry(self.pid, self.started, device, check, amount)])
            return None

    def release(self, check: str) -> None:
        with self._locked():
            entries = self._read()
            self._write([e for e in entries if e.check != check])

    def reserve(self, device: str, check: str, amount: int, capacity: int, wait_s: float,
                on_wait: Callable[[int], None] = lambda held: None,
                cancel: threading.Event | None = None) -> tuple[float, int]:
        """Reserve as `try_reserve` does, waiting while the others leave too little: `on_wait(held)` each time what
        they hold changes. Returns (seconds waited, the others' bytes when it waited most); raises `Crowded` when
        `wait_s` passed first (the check keeps what it held), `Cancelled` when `cancel` is set."""
        began, seen, most = time.monotonic(), None, 0
        while True:
            held = self.try_reserve(device, check, amount, capacity)
            if held is None:
                return time.monotonic() - began, most
            most = max(most, held)
            if held != seen:
                seen = held
                on_wait(held)
            waited = time.monotonic() - began
            if waited >= wait_s:
                raise Crowded(amount, held, capacity, waited)
            if cancel is not None and cancel.wait(min(POLL_S, wait_s - waited)):
                raise Cancelled()
            if cancel is None:
                time.sleep(min(POLL_S, wait_s - waited))


class Crowded(Exception):
    """The other checks on a device held too much for too long."""

    def __init__(self, amount: int, held: int, capacity: int, waited: float) -> None:
        super().__init__(f"{amount} bytes wanted, {held} held by other checks of {capacity}, {waited:.0f} s waited")
        self.amount, self.held, self.capacity, self.waited = amount, held, capacity, waited


class Cancelled(Exception):
    pass


def ledger_path(cache_dir: str) -> Path:
    """The ledger of the checks that share `cache_dir`'s parent (the dice-lsp cache: every process of a user)."""
    return Path(cache_dir).parent / FILE
