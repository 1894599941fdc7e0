"""Worker processes seen from the caller: start one in its own session and private directory, talk, kill its tree.

A worker that hangs, segfaults or runs out of memory ends only itself; its death becomes a `HarnessError`.
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import contextlib
import dataclasses
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import IO

from dice_lsp.harness import cgroups, messages, samples, sandbox
from dice_lsp.harness.lending import lent
from dice_lsp.harness.limits import (environment, memory_bytes, memory_limit_gb, sandbox_status, user_processes,
                                     uses_gpu, why_root, worker_user)
from dice_lsp.harness.errors import HarnessError
from dice_lsp.harness.options import Options

# The longest reply line read from a worker: the longest real ones carry a build's compiler output (a few MiB);
# past this the worker is writing junk (the candidate can reach the reply pipe) and is ended before it fills memory.
MAX_REPLY_BYTES = 32 << 20


_SPAWNER = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="dice-worker-spawner")

# Every worker started and not yet reaped: the caller's exit kills and removes what a reaper thread (a daemon, which
# exit stops) did not get to, so no worker folder or process survives a normal exit
_live: weakref.WeakSet[Worker] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for worker in list(_live):
        worker.kill(wait=False)
    for worker in list(_live):
        worker._reap()


def _memory_note(cgroup: cgroups.Cgroup | None, options: Options, role: str) -> str:
    """Where no memory cgroup holds (a caller that is not root, no memory controller), each process is limited on
    its own (RLIMIT_AS, not with CUDA): what the report says of it. Empty where the cgroup caps them together."""
    if cgroup is not None and cgroup.memory:
        return ""
    return ("no memory cgroup could be made here, so the worker's processes are not capped together"
            + ("" if uses_gpu(options) and role != "builder" else
               f"; each is limited to {memory_limit_gb(options):.0f} GB of address space"))


def _count_processes(env: dict[str, str], user: int, more: int) -> None:
    """A worker's process count where no pids cgroup holds: RLIMIT_NPROC counts every process of the user, so room
    for `more` than run now (root's count is not enforced, so a root caller's workers get one where they run as an
    unprivileged user). Written into the limits `env` carries."""
    limits = messages.decode_limits(env[messages.LIMITS_VARIABLE])
    limits = dataclasses.replace(limits, processes=user_processes(user) + more)
    env[messages.LIMITS_VARIABLE] = messages.encode_limits(limits)


class Worker:
    """One worker process, `python -m dice_lsp.harness.worker`, in a new session (so its group can be killed) and,
    where bubblewrap can start, in its own sandbox (`harness.sandbox`).

    `role` decides what the sandbox may reach besides the runtime it needs and its scratch tmpfs: a "solution"
    reads its folder (`directory`: the solution's file, later its trial inputs) and the build cache; a "reference"
    also writes its folder (its trial inputs, the outputs handed to it); a "builder" runs no code of the candidate's
    but compiles its text, so it writes nothing but its scratch (the caller copies what it built out of it,
    `open_scratch`) and reads only `readable` (the shared precompiled header's folder), not the cache."""

    def __init__(self, options: Options, extra_env: dict[str, str] | None = None, warm: bool = True,
                 role: str = "solution", readable: tuple[str, ...] = ()) -> None:
        """`warm`: create the CUDA context before the first command (a worker that only builds needs none)."""
        self.role = role
        self.key = spare_key(options, extra_env or {}, role)
        found = sandbox_status(options)
        self.sandboxed, self.sandbox_reason = found.available, found.reason
        self.root_reason = ""  # why a root caller's sandboxed worker stayed root, where it did
        self.directory = tempfile.mkdtemp(prefix="dice-harness-")
        env = environment(options, extra_env or {}, warm, role)
        read, write = os.pipe()
        self.log_path = Path(self.directory) / "worker.log"
        argv = [sys.executable, "-m", "dice_lsp.harness.worker", str(write)]
        # A builder's compilers yield the cores to checks: in batch mode the next batch builds while this one is
        # timed, and a timed forward should not wait on nvcc (every process it starts inherits the niceness)
        nice = ["nice", "-n", str(BUILDER_NICENESS)] if role == "builder" and shutil.which("nice") else []
        self.child_pid = 0
        self.child_started = ""
        self.cgroup = cgroups.Cgroup(options.process_limit, memory_bytes(options, role))
        applied = self.cgroup.applied if self.cgroup else []
        self.memory_note = _memory_note(self.cgroup, options, role)
        room = self._room(options, env, readable, found) if self.sandboxed else None
        self.room, self.user = room, room.user if room else 0
        if options.process_limit and not any(a.startswith("pids") for a in applied) and \
                (os.getuid() != 0 or self.user):
            _count_processes(env, self.user or os.getuid(), options.process_limit)
        # The folders it writes besides its own (the reference's compile caches), lent to its user while it lives
        # (`lent`; given back at `_reap`)
        self._lent = contextlib.ExitStack()
        os.makedirs(options.compiled_dir, exist_ok=True)
        if room is not None and self.user:
            self._lent.enter_context(lent([w for w in room.writable if w != self.directory], self.user))
        try:
            with open(self.log_path, "wb") as log:
                self._start(nice + argv, room, found.tool, env, log, write)
        except BaseException:  # no worker: its folders go back now
            self._lent.close()
            raise
        os.close(write)
        self.reply = read
        self.buffer = b""
        _live.add(self)
        if self.cgroup is not None:  # before any command: nothing of the candidate's has run yet
            self.cgroup.add(self.pid)
        # The commands whose replies are still to come, oldest first: a kept worker must owe none it has not been
        # asked about, and each reply must answer the command it comes for
        self.pending: collections.deque[type[messages.Command]] = collections.deque()
        # CPU its processes use while it waits (between commands, and for the answer to a build request), counted
        # once `watch_idle` is set (a solution's worker): the kernel's account when a reply came and when the next
        # command or answer went (`samples.tree_cpu_ms`)
        self.refused: tuple[str, ...] = ()  # the sockets its sandbox refused, as its replies said
        self.watch_idle = False
        self.idle_cpu_ms = 0.0
        self._replied_cpu: float | None = None
        self._paused: list[int] = []

    def _start(self, argv: list[str], room: sandbox.Room | None, tool: str, env: dict[str, str], log: IO[bytes],
               write: int) -> None:
        """The worker's process: in `room` under bubblewrap (`tool`) where it has one, else plain; its output to
        `log`, its replies on the pipe whose writing end is `write`."""
        if room is None:
            env["TMPDIR"] = self.directory
            self.process = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, pass_fds=(write,),
                cwd=self.directory, env=env, start_new_session=True)
            return
        if self.user:  # it reads (a reference: writes) its folder as that user
            os.chown(self.directory, self.user, self.user)
            env[sandbox.USER_VARIABLE] = str(self.user)
        # bwrap --die-with-parent ties the sandbox to the *thread* that starts it (PR_SET_PDEATHSIG): started from a
        # check's thread, it would be killed when that check ends. One thread that lives as long as this process
        # starts them all.
        self.process, self.child_pid = sandbox.spawn(
            argv, room, tool, sandbox.scrub(env), start=lambda *a, **k: _SPAWNER.submit(*a, **k).result(),
            stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, pass_fds=(write,),
            cwd=self.directory, env=sandbox.scrub(env), start_new_session=True)
        if self.child_pid and not room.pid1:  # bwrap's init is PID 1 there: the worker is its one child
            self.child_pid = _only_child(self.child_pid)
        found = _stat(self.child_pid) if self.child_pid else []
        self.child_started = found[19] if len(found) > 19 else ""

    def _room(self, options: Options, env: dict[str, str], extra: tuple[str, ...],
              found: sandbox.Availability) -> sandbox.Room:
        readable = list(extra)
        writable: tuple[str, ...] = ()
        if self.role != "builder":  # a builder reads no entry: what it makes, the caller copies in
            cache = options.extensions_dir
            os.makedirs(cache, exist_ok=True)  # a bind needs its source
            readable.append(cache)
        if env.get("PYTHONPYCACHEPREFIX"):
            os.makedirs(env["PYTHONPYCACHEPREFIX"], exist_ok=True)
            readable.append(env["PYTHONPYCACHEPREFIX"])
        if env.get("CUDA_HOME") and os.path.isdir(env["CUDA_HOME"]):
            readable.append(env["CUDA_HOME"])
        hidden: tuple[str, ...] = ()
        if self.role == "reference":
            writable = (*writable, self.directory, options.compiled_dir)
        else:
            readable.append(self.directory)
            hidden = (options.compiled_dir,)  # the reference's compiled code (`Options.compiled_dir`)
        gpu = uses_gpu(options) and self.role != "builder"
        # A reference worker opens the solution's outputs by CUDA IPC, which tells processes apart by their PIDs
        # inside their namespaces: the solution's worker is PID 1 in its sandbox, so this one must not be
        # A root caller's candidates run as an unprivileged user (`sandbox` says why), and so do builders: the
        # compiler echoes the lines it cannot parse, and a source may include any file root may read
        user = worker_user(options, found, gpu)
        if os.geteuid() == 0 and not user:
            self.root_reason = why_root(options, found, gpu)
        # A builder builds in its scratch: a header precompiled for flags of the candidate's alone is ~0.8 GB
        scratch = options.scratch_limit_mb
        if self.role == "builder":
            scratch = max(scratch, BUILDER_SCRATCH_MB)
        return sandbox.Room(scratch_mb=scratch, readable=tuple(readable), writable=writable,
                            gpu=gpu, pid1=not (gpu and self.role == "reference"), user=user, hidden=hidden)

    @property
    def pid(self) -> int:
        """The worker's own process (inside a sandbox, its PID 1 seen from here): the one to stop and continue."""
        return self.child_pid or self.process.pid

    def open_scratch(self) -> int:
        """A descriptor of the worker's writable scratch folder, opened while it runs. What the folder holds stays
        readable through it after the worker, its sandbox and the tmpfs's mount are gone, when nothing can change it
        any more: the caller copies a builder's library out then (`cache.install`), never through a link."""
        if not self.sandboxed:
            return os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        if not self.child_pid or not _running(self.child_pid, self.child_started):
            raise HarnessError("the builder ended before what it built could be taken", "died", self.log_tail())
        root = os.open(f"/proc/{self.child_pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            folder = os.open(sandbox.SCRATCH.lstrip("/"), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                             dir_fd=root)
        finally:
            os.close(root)
        if not _running(self.child_pid, self.child_started):  # its PID may name another process by now
            os.close(folder)
            raise HarnessError("the builder ended before what it built could be taken", "died", self.log_tail())
        return folder

    def scratch_full_mb(self) -> int:
        """The size of the worker's scratch tmpfs (its /tmp, HOME and TMPDIR) in MiB when it is all but full: what
        failed may have failed for want of room ("inline_container.cc ... unexpected pos" from torch.save); 0 when
        it is not, or cannot be looked at (no sandbox, the worker gone)."""
        if not self.sandboxed or not self.child_pid or not _running(self.child_pid, self.child_started):
            return 0
        try:
            found = os.statvfs(self.scratch)
        except OSError:
            return 0
        size, free = found.f_blocks * found.f_frsize, found.f_bavail * found.f_frsize
        return size >> 20 if size and free < max(8 << 20, size // 50) else 0

    @property
    def scratch(self) -> str:
        """The worker's private writable folder as this process reaches it (a sandbox's tmpfs through /proc)."""
        return f"/proc/{self.child_pid}/root{sandbox.SCRATCH}" if self.sandboxed else self.directory

    @property
    def inner_scratch(self) -> str:
        """The same folder as the worker names it."""
        return sandbox.SCRATCH if self.sandboxed else self.directory

    @property
    def owed(self) -> int:
        """Replies this worker still owes."""
        return len(self.pending)

    def file(self, name: str, text: str) -> str:
        path = Path(self.directory) / name
        path.write_text(text)
        return str(path)

    def _count_idle(self) -> None:
        """What its processes used since its last reply, while it waited for this command or answer."""
        if self.watch_idle and self._replied_cpu is not None:
            self.idle_cpu_ms += max(0.0, samples.tree_cpu_ms(self.pid) - self._replied_cpu)
            self._replied_cpu = None

    def send(self, command: messages.Command) -> None:
        self._count_idle()
        try:
            self.process.stdin.write((messages.encode_command(command) + "\n").encode())
            self.process.stdin.flush()
            self.pending.append(type(command))
        except (BrokenPipeError, OSError) as error:
            raise HarnessError(f"worker ended before {command.tag}: {self.ending()}", "died",
                               self.log_tail()) from error

    def receive(self, timeout: float, cancel: threading.Event | None = None, stage: str = "") -> messages.Reply:
        """The reply to the oldest command sent and not yet answered: its `answer` class, or `messages.Failed`; or
        an interim reply the command may send while it runs (`Command.interims`), which the caller answers.
        A `HarnessError` raised here carries `stage` as its stage."""
        try:
            reply = self._receive(timeout, cancel, stage)
        except HarnessError as error:
            error.stage = error.stage or stage
            raise
        if self.watch_idle and not isinstance(reply, messages.Called):  # a timed call's end waits microseconds
            self._replied_cpu = samples.tree_cpu_ms(self.pid)
        return reply

    def _receive(self, timeout: float, cancel: threading.Event | None, stage: str) -> messages.Reply:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            if cancel is not None and cancel.is_set():  # the check's end closes its workers (a fit reference is kept)
                raise HarnessError("cancelled", "cancelled")
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise HarnessError(f"{stage or 'stage'} ran past its {timeout:.0f} s limit", "timeout",
                                   self.log_tail())
            ready, _, _ = select.select([self.reply], [], [], min(left, 0.05))
            if ready:
                chunk = os.read(self.reply, 1 << 20)
                if not chunk:
                    self.process.wait()
                    raise HarnessError(f"{stage or 'worker'} crashed: {self.ending()}", "died", self.log_tail())
                self.buffer += chunk
                if len(self.buffer) > MAX_REPLY_BYTES and b"\n" not in chunk:
                    raise self.malformed(stage, f"a line over {MAX_REPLY_BYTES >> 20} MiB", self.buffer)
        line, self.buffer = self.buffer.split(b"\n", 1)
        command = self.pending.popleft() if self.pending else None
        if len(line) > MAX_REPLY_BYTES:
            raise self.malformed(stage, f"a line over {MAX_REPLY_BYTES >> 20} MiB", line)
        try:
            reply = messages.decode_reply(line)
        except messages.MessageError as error:
            raise self.malformed(stage, str(error), line) from None
        if reply.refused:  # sockets its sandbox refused since its last reply, as it saw them
            self.refused = (*self.refused, *reply.refused)
        if command is not None and isinstance(reply, command.interims):
            self.pending.appendleft(command)  # asked while the command runs: its own answer is still to come
            return reply
        if command is None or not isinstance(reply, (command.answer, messages.Failed)):
            asked = f"{command.tag} command" if command else "command never sent"
            raise self.malformed(stage, f"a {reply.tag} reply to a {asked}", line)
        return reply

    def answer(self, answer: messages.Command) -> None:
        """Answer an interim reply (`BuildAnswer` to a `BuildRequest`, `Next` to a `Called`): the worker reads it
        inside the command it still owes a reply to."""
        self._count_idle()
        try:
            self.process.stdin.write((messages.encode_command(answer) + "\n").encode())
            self.process.stdin.flush()
        except (BrokenPipeError, OSError) as error:
            raise HarnessError(f"worker ended while answered: {self.ending()}", "died", self.log_tail()) from error

    def call(self, command: messages.Command, timeout: float, cancel: threading.Event | None = None,
             stage: str = "") -> messages.Reply:
        self.send(command)
        return self.receive(timeout, cancel, stage or command.tag)

    def pause(self) -> None:
        """Stop the worker and every process below it (SIGSTOP) until `resume`: nothing of the candidate's runs
        while another side is timed. Between commands only: a stopped worker answers nothing."""
        self._paused = [self.pid, *samples.descendants(self.pid)]
        for pid in self._paused:
            self._signal_pid(pid, signal.SIGSTOP)

    def resume(self) -> None:
        for pid in self._paused:
            self._signal_pid(pid, signal.SIGCONT)
        self._paused = []

    def _signal_pid(self, pid: int, number: int) -> None:
        if self.process.poll() is not None:  # its PIDs may belong to other processes by now
            return
        try:
            os.kill(pid, number)
        except (ProcessLookupError, PermissionError):
            pass

    def malformed(self, stage: str, why: str, line: bytes) -> HarnessError:
        """The error for a reply that does not decode: the worker is ended (nothing it sends after can be trusted
        to answer the right command), and the message shows how the line began, cut short."""
        self.kill()
        began = line[:200].decode("utf-8", "replace")
        return HarnessError(f"{stage or 'the worker'} sent a reply that does not decode ({why}); it began "
                            f"{began!r}{'...' if len(line) > 200 else ''}", "crashed", self.log_tail())

    def ending(self) -> str:
        code = self.process.poll()
        if code is None:
            return "still running"
        if self.sandboxed and 128 < code < 160:  # bwrap passes on its worker's death by a signal as 128 + its number
            code = 128 - code
        if code < 0:
            try:
                said = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                said = f"killed by signal {-code}"
            if self.cgroup is not None and self.cgroup.out_of_memory():
                said += f" (its memory cap of {self.cgroup.memory / (1 << 30):.1f} GiB was reached)"
            return said
        return f"exited with status {code}"

    def log_tail(self, limit: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    def signal(self, number: int) -> None:
        if self.process.poll() is not None:  # its PID may belong to another process by now
            return
        try:
            os.kill(self.pid, number)
        except (ProcessLookupError, PermissionError):
            pass

    def kill(self, wait: bool = True) -> None:
        """Kill the worker and everything it started (compilers, ninja): a sandbox by its PID 1, whose end ends its
        namespace, else by process group; `wait`: until it ended."""
        if self.child_pid and self.process.poll() is None:
            # bwrap, its parent, exits once it ended: waiting for bwrap is waiting for the sandbox's end (locks
            # its processes held are free after that)
            self.signal(signal.SIGKILL)
        else:
            self._kill_group()
        if wait:
            self._wait()

    def _kill_group(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def _wait(self) -> None:
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # a sandbox that did not end on its PID 1's kill: end bwrap itself
            self._kill_group()
            self.process.wait()
        if self.child_pid:  # bwrap killed from outside leaves its PID 1 to die on its own (a parent-death signal)
            deadline = time.monotonic() + 10
            while _running(self.child_pid, self.child_started) and time.monotonic() < deadline:
                try:  # still the same process (its start time says so): its number names no other yet
                    os.kill(self.child_pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    break
                time.sleep(0.01)

    def close(self, wait: bool = True) -> None:
        """Kill the worker's process group and remove its directory; `wait=False` leaves the waiting for its end
        and the removal to a background thread."""
        self.kill(wait=False)
        try:
            os.close(self.reply)
        except OSError:
            pass
        if self.process.stdin:
            try:
                self.process.stdin.close()
            except OSError:
                pass
        if wait:
            self._reap()
        else:
            threading.Thread(target=self._reap, name="dice-worker-reaper", daemon=True).start()

    def _reap(self) -> None:
        self._wait()
        self._lent.close()
        shutil.rmtree(self.directory, ignore_errors=True)
        if self.cgroup is not None:
            self.cgroup.close()
        _live.discard(self)



BUILDER_NICENESS = 10
BUILDER_SCRATCH_MB = 3072  # a builder's tmpfs holds its whole build (RAM, and only what it writes)


def _stat(pid: int) -> list[str]:
    """/proc/<pid>/stat's fields after the command name (state first); [] when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _running(pid: int, started: str) -> bool:
    """Whether `pid` is still the process that started at `started` (clock ticks after boot) and has not ended
    (a zombie has: it holds nothing but its exit status)."""
    fields = _stat(pid)
    return len(fields) > 19 and fields[19] == started and fields[0] not in ("Z", "X")


def spare_key(options: Options, extra: dict[str, str], role: str = "solution") -> tuple:
    """What a worker's start fixes (its role, limits, sandbox, GPU or not, environment): a spare serves only checks
    that agree."""
    return (role, options.file_size_limit_mb, options.cpu_time_limit_s, options.memory_limit_gb,
            options.scratch_limit_mb, options.process_limit, options.sandbox, options.unprivileged,
            options.unprivileged_gpu, options.device != "cpu",
            options.cuda_home, options.extensions_dir, tuple(sorted(extra.items())))


def _only_child(pid: int) -> int:
    """The one child of `pid` (bwrap's init, whose child is the worker), once it exists; 0 if `pid` ends first."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _stat(pid):
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:  # a kernel without CONFIG_PROC_CHILDREN: whose parent is it, by every process's stat
            children = [entry for entry in os.listdir("/proc")
                        if entry.isdigit() and _stat(int(entry))[1:2] == [str(pid)]]
        if children:
            return int(children[0])
        time.sleep(0.001)
    return 0
