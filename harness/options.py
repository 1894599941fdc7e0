"""How a check runs: trials, tolerance, time limits, baselines and resource limits for the worker processes.

One frozen dataclass, sent to every worker as JSON (`to_dict`, read back by `from_dict`); the server makes it from the
editor's `dice.*` settings (`dice_lsp.checking.check_options`). Its defaults are the one owner of a check's defaults:
the editor's settings (dice_lsp/settings.py) and the command line's flags (dice_lsp/commands/check.py) take theirs from
here.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

Baseline = Literal["eager", "compile", "both", "none"]
# Where candidate code runs: "auto" sandboxes every worker when bubblewrap can start here and says so when it cannot;
# "require" refuses to run a check without it; "off" runs workers as plain processes (limits and sessions only).
Sandbox = Literal["auto", "require", "off"]


def default_cache_dir() -> str:
    root = os.environ.get("DICE_LSP_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "dice-lsp")
    return str(Path(root) / "extensions")


@dataclass(frozen=True)
class Options:
    correctness_trials: int = 5
    trials_at_once: int = 0  # trials the solution's worker runs before its outputs are compared; 0: as the GPU fits
    timing_trials: int = 100
    warmup_trials: int = 10
    timing_budget_s: float = 0.1  # a short forward gets trials past timing_trials until the loop has run this long
    timing_rounds: int = 4  # the sides take turns, round by round, so a drifting GPU clock affects them alike
    timing_cap_s: float = 20.0  # a side's timed forwards over all rounds stop near this (long forwards get fewer)
    warmup_s: float = 0.01  # each round's warm-up lasts at least this long too (the clock ramps up from idle)
    timed_checks: int = 2  # timed calls a round whose outputs are kept (chosen after they ran) and compared
    timing_threads: int = 1  # CPU intra-op threads both sides are timed with; 1 times CPU time, more wall time
    atol: float = 1e-2  # KernelBench v0.1 and the DICE paper
    rtol: float = 1e-2
    seed: int = 42  # Model and ModelNew are both built right after torch.manual_seed(seed)
    baseline: Baseline = "both"  # which references to time: eager PyTorch, torch.compile, both, none
    tf32: bool = False  # torch.backends.cuda.matmul.allow_tf32, set identically on both sides
    cudnn_tf32: bool = True  # torch.backends.cudnn.allow_tf32 (torch's default), identical on both sides
    device: str = "auto"  # "auto" | "cpu" | "cuda" | "cuda:N"
    build_timeout: float = 600.0
    run_timeout: float = 120.0  # per run stage: reference, verify, inspect, time
    memory_limit_gb: float = 64.0  # address space is not limited with CUDA (it reserves huge ranges): see worker
    file_size_limit_mb: int = 2048  # no single file a worker writes may grow past this
    cpu_time_limit_s: int = 3600
    scratch_limit_mb: int = 1024  # a sandboxed worker's only writable folder (its /tmp, HOME, TMPDIR): a tmpfs this size
    process_limit: int = 512  # processes and threads one worker may run at once (a pids cgroup where one can be made)
    sandbox: Sandbox = "auto"
    # A root caller's candidates run as an unprivileged user (nobody) in their sandbox: see harness/sandbox.py. False
    # leaves them root to the kernel (no process count without a pids cgroup, root-only files readable), for
    # comparisons. With a GPU only where unprivileged_gpu is on too: off while CUDA's IPC between two nobody sandboxes
    # fails (`mapping of buffer object failed` on an H100, 2026-12-07, where root's works; the check is still correct,
    # its outputs go through a file, but no watched round can be timed), until tests/harness/test_sandbox_gpu.py passes
    unprivileged: bool = True
    unprivileged_gpu: bool = False
    cache_dir: str = ""  # "" -> ~/.cache/dice-lsp/extensions
    cuda_home: str = ""  # the CUDA toolkit builds use (nvcc in bin/); "" -> CUDA_HOME, else /usr/local/cuda
    light_build: bool = True  # try split translation units with lighter headers first
    tiny_output_ratio: float = 0.05  # relative L2 error above this flags "tiny-output" even when allclose passes
    precision_ratio: float = 1e-4  # relative L2 error above this (fp32 reference) flags "precision"
    timer_tolerance: float = 0.25  # host time over events time beyond this fraction (+ overhead) flags "timer-mismatch"

    @property
    def extensions_dir(self) -> str:
        return self.cache_dir or default_cache_dir()

    @property
    def compiled_dir(self) -> str:
        """Where the reference's worker keeps torch.compile's caches (inductor's, triton's) from one check to the
        next: a new process compiled the example's reference in 19 s, and in 2.8 s from this cache. Beside the
        build cache, not in it: a solution's worker reads the build cache, and must not read the reference's
        compiled code; its sandbox shows this folder empty."""
        return str(Path(self.extensions_dir).parent / "compiled-references")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Options:
        known = {k: v for k, v in raw.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def with_(self, **changes: Any) -> Options:
        return replace(self, **changes)
