"""What a worker process may use, decided in the caller before it starts: its environment (the toolkit, the
compile caches a reference keeps), its limits (`messages.Limits`, applied by the worker before its first command),
whether it may use a GPU, the unprivileged user it runs as, and whether a sandbox is required.
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import os
from pathlib import Path

import dice_lsp
from dice_lsp.harness import messages, sandbox, view
from dice_lsp.harness.errors import HarnessError
from dice_lsp.harness.options import Options

# The folder that holds the `dice_lsp` package in use, so `python -m dice_lsp.harness.worker` imports this copy.
ROOT = str(Path(dice_lsp.__file__).resolve().parent.parent)


def limits_of(options: Options, warm: bool, role: str) -> messages.Limits:
    """What a worker for `role` is held to, and does before its first command (`worker.apply_limits`)."""
    gpu = uses_gpu(options) and role != "builder"
    return messages.Limits(file_size_mb=options.file_size_limit_mb, cpu_time_s=options.cpu_time_limit_s,
                           memory_gb=memory_limit_gb(options), cuda=gpu, role=role,
                           warm_device=options.device if warm and gpu else "")


def environment(options: Options, extra: dict[str, str], warm: bool, role: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    # The toolkit the options name, else the caller's CUDA_HOME, else the usual place: torch's build in the worker
    # takes nvcc from CUDA_HOME/bin first
    if options.cuda_home:
        env["CUDA_HOME"] = options.cuda_home
    elif not env.get("CUDA_HOME") and Path("/usr/local/cuda/bin/nvcc").exists():
        env["CUDA_HOME"] = "/usr/local/cuda"
    env[messages.LIMITS_VARIABLE] = messages.encode_limits(limits_of(options, warm, role))
    for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):  # only the reference's worker keeps compiled code
        env.pop(name, None)
    if role == "reference":
        env["TORCHINDUCTOR_CACHE_DIR"] = options.compiled_dir
        env["TRITON_CACHE_DIR"] = os.path.join(options.compiled_dir, "triton")
    if "PYTHONPYCACHEPREFIX" not in env and not torch_writable():
        # torch installed read-only (a system or container install without bytecode): every worker would compile
        # the ~900 modules it imports from source again, seconds each time; keep their bytecode in our cache.
        env["PYTHONPYCACHEPREFIX"] = str(Path(options.extensions_dir).parent / "pycache")
    env.update(extra)
    return env


def uses_gpu(options: Options) -> bool:
    """Whether a worker for `options` may use a GPU: not with device "cpu", nor where no NVIDIA device node exists
    (then "auto" means the CPU, and the worker's address space can be limited)."""
    return options.device != "cpu" and bool(glob.glob(view.GPU_NODE))


def memory_limit_gb(options: Options) -> float:
    """The option's memory limit, never above the machine's physical memory (a limit past it holds nothing)."""
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    return min(options.memory_limit_gb, physical)


def memory_bytes(options: Options, role: str) -> int:
    """The memory cgroup limit of every worker, on the CPU as with CUDA: one cap for the worker and everything it
    starts (RLIMIT_AS, which also holds on the CPU, is per process; with CUDA it cannot be used at all)."""
    return int(memory_limit_gb(options) * (1 << 30))


def user_processes(uid: int) -> int:
    """The processes and threads of user `uid` now (what RLIMIT_NPROC counts)."""
    count = 0
    for entry in os.scandir("/proc"):
        try:
            if entry.name.isdigit() and entry.stat().st_uid == uid:
                count += len(os.listdir(f"/proc/{entry.name}/task"))
        except OSError:
            pass
    return count


def worker_user(options: Options, found: sandbox.Availability, gpu: bool) -> int:
    """The unprivileged uid a sandboxed worker runs as; 0 where it runs as the caller."""
    if not (found.available and found.user and options.unprivileged):
        return 0
    return found.user if not gpu or options.unprivileged_gpu and view.gpu_nodes_open_to_all() else 0


def why_root(options: Options, found: sandbox.Availability, gpu: bool) -> str:
    """Why a root caller's sandboxed worker stays root (`sandbox` says what that leaves open)."""
    if not options.unprivileged:
        return "unprivileged = False"
    if found.root_note:
        return found.root_note
    if gpu and not options.unprivileged_gpu:
        return "unprivileged_gpu = False: CUDA IPC between nobody's sandboxes does not work yet"
    return "only root may open the GPU's device nodes here"


def sandbox_status(options: Options) -> sandbox.Availability:
    """Whether this check's workers run sandboxed; raises when the options require a sandbox that cannot start."""
    if options.sandbox == "off":
        return sandbox.Availability(False, "", "the sandbox is turned off (sandbox = \"off\")")
    found = sandbox.status()
    if not found.available and options.sandbox == "require":
        raise HarnessError(f"the sandbox is required but cannot start here: {found.reason}", "sandbox")
    return found


@functools.lru_cache(maxsize=1)
def torch_writable() -> bool:
    """Can Python write bytecode beside torch's sources? (Found without importing torch in the caller.)"""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return True
    directory = Path(spec.origin).parent
    cache = directory / "__pycache__"
    return os.access(cache if cache.is_dir() else directory, os.W_OK)
