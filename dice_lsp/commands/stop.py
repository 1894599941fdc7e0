"""How a command stops on Ctrl-C (SIGINT) or SIGTERM: the command unwinds, and no process it started outlives it.

Harness workers lead their own sessions, so the terminal's Ctrl-C never reaches them and nothing else would end them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
import time
from pathlib import Path


SIGNALS = (signal.SIGINT, signal.SIGTERM)
PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>


class Stopped(BaseException):
    """Raised in the main thread by SIGINT or SIGTERM. A BaseException, as KeyboardInterrupt is, so that no
    `except Exception` in the harness, the engine or training takes it for a failure and carries on."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a command a signal ended: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + self.signum

    @property
    def why(self) -> str:
        return "interrupted" if self.signum == signal.SIGINT else f"stopped by {signal.Signals(self.signum).name}"


@contextlib.contextmanager
def stoppable():
    """While the block runs, SIGINT and SIGTERM raise `Stopped` in the main thread and start a `Reaper`, which kills
    every child process at once and any started after, until the block has unwound (a batch build that was between
    jobs may start one more). A second signal ends the process at once. The harness's spares and kept reference
    workers belong to the pools of the commands that started them, which close them as they unwind."""
    if threading.current_thread() is not threading.main_thread():  # signals reach only the main thread
        yield
        return
    reaper = Reaper()

    def on_signal(signum: int, frame) -> None:
        if reaper.started:
            reaper.sweep()
            os._exit(128 + signum)  # the first signal's unwinding is stuck: leave now, nothing of ours running
        reaper.start()
        raise Stopped(signum)

    previous = {number: signal.signal(number, on_signal) for number in SIGNALS}
    try:
        yield
    finally:
        reaper.stop()
        for number, handler in previous.items():
            signal.signal(number, handler)


class Reaper:
    """Kills this process's children (and, for those that lead a process group, the whole group: a worker's compilers
    and ninja) as soon as a stop begins, and again every `period` seconds until `stop()`. The harness cancels its own
    checks too; this also ends what it does not expose, such as batch mode's parallel builds.

    A grandchild in a group of its own (ninja starts each compiler in a new one) outlives its parent's kill, and an
    orphan goes to init, out of our sight; so once a stop begins this process is made the child subreaper
    (prctl PR_SET_CHILD_SUBREAPER): every orphan of ours becomes our child, and the next sweep finds it."""

    def __init__(self, period: float = 0.05) -> None:
        self.period = period
        self.started = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dice-stop-reaper", daemon=True)

    def start(self) -> None:
        self.started = True
        adopt_orphans()
        self.sweep()
        self._thread.start()

    def stop(self, patience: float = 5.0) -> None:
        """After the last sweep, sweep again while orphans still arrive (a killed parent's children are handed to us
        only once it has exited), for `patience` seconds at most."""
        if not self.started:
            return
        self._done.set()
        self._thread.join()
        deadline = time.monotonic() + patience
        while self.sweep() and time.monotonic() < deadline:
            time.sleep(self.period)

    def _loop(self) -> None:
        while not self._done.wait(self.period):
            self.sweep()

    def sweep(self) -> int:
        """Kill every live child now; how many there were."""
        own_group = os.getpgrp()
        found = children(os.getpid())
        for pid, group in found:
            try:
                if group == pid and group != own_group:
                    os.killpg(group, signal.SIGKILL)
                else:  # in our own group (never kill that: it holds us and the shell's pipeline) or in someone else's
                    os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        return len(found)


def adopt_orphans() -> None:
    """Make this process the subreaper of its descendants (Linux 3.4+; elsewhere nothing happens)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def children(parent: int) -> list[tuple[int, int]]:
    """(pid, process group) of each live child of `parent`, read from /proc (empty where there is none)."""
    found = []
    try:
        entries = [entry for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return found
    for entry in entries:
        try:
            stat = Path("/proc", entry, "stat").read_text()
        except OSError:
            continue  # ended while we looked
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses, so split after its last ")"
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) >= 3 and fields[0] != "Z" and int(fields[1]) == parent:
            found.append((int(entry), int(fields[2])))
    return found

