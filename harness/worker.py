"""A worker process: runs one side (reference or solution) of a check, one stage per command from its parent.

Commands arrive as JSON lines on stdin; each reply is one JSON line on the file descriptor named in argv.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import traceback
from typing import Any

from dice_lsp.harness import timing  # binds the clocks before any candidate code is imported


def apply_limits(limits: dict[str, Any]) -> None:
    """Resource limits for this process and the compilers it starts; address space only without CUDA."""
    def cap(kind: int, value: int) -> None:
        soft, hard = resource.getrlimit(kind)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(kind, (value, hard))

    if limits.get("file_size_mb"):
        cap(resource.RLIMIT_FSIZE, int(limits["file_size_mb"]) << 20)
    if limits.get("cpu_time_s"):
        cap(resource.RLIMIT_CPU, int(limits["cpu_time_s"]))
    if limits.get("memory_gb") and not limits.get("cuda"):
        cap(resource.RLIMIT_AS, int(float(limits["memory_gb"]) * (1 << 30)))
    cap(resource.RLIMIT_CORE, 0)


class Side:
    """The state one worker keeps between commands."""

    def __init__(self) -> None:
        self.module: Any = None
        self.model: Any = None
        self.compiled: Any = None  # the reference under torch.compile, made by the first compile timing round
        self.device: Any = None
        self.trials: list[tuple[int, list[Any]]] = []
        self.expected: list[list[Any]] = []
        self.expected_changed: list[Any] = []
        self.options: dict[str, Any] = {}
        self.builder: Any = None
        self.outputs: Any = None  # the solution's last outputs, until the reference worker has compared them
        self.handout: list[list[Any]] = []  # reference: every trial's inputs on the GPU, shared by CUDA IPC
        self.received: Any = None  # solution: the handout's copies, received before the solution was imported
        self.timed_check: Any = None  # the check that `timed_inputs` were copied for
        self.timed_inputs: Any = None  # one check's copies of the first trial's inputs (timing.placements)


def load_module(path: str, name: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def pick_device(choice: str) -> Any:
    import torch

    if choice == "cpu" or (choice == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError(f"device {choice!r} asked for, but torch sees no CUDA GPU")
    device = torch.device("cuda" if choice == "auto" else choice)
    if device.index is None:  # set_device needs an index on older torch
        device = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(device)
    return device


def warm_up_cuda(device: str) -> str:
    """What the GPU stages need, done before the first command, so a spare waiting for its check pays it while idle:
    the CUDA context of `device` ("auto", "cuda", "cuda:N"), and the modules the profiler (inspect) and torch.compile
    import on first use (torch._inductor and torch._dynamo: ~3 s). Importing attaches no profiler hooks.
    A failure is left to the stage that needs the GPU, which reports it; it is returned for benchmarks to show."""
    import torch

    try:
        if torch.cuda.is_available():
            torch.empty(1, device="cuda" if device == "auto" else device)  # the context and the allocator's first block
            import torch._inductor  # noqa: F401
    except Exception as error:  # the stage that uses CUDA reports it
        return f"{type(error).__name__}: {error}"
    return ""


def main() -> int:
    reply = os.fdopen(int(sys.argv[1]), "w", buffering=1)
    limits = json.loads(os.environ.get("DICE_HARNESS_LIMITS", "{}"))
    apply_limits(limits)
    from dice_lsp.harness import stages
    import torch.utils.cpp_extension  # noqa: F401  (what a build stage needs first: ~100 modules)

    started = timing._perf_counter()
    warm = warm_up_cuda(limits["warm_device"]) if limits.get("warm_device") else ""
    warm_seconds = timing._perf_counter() - started

    side = Side()
    for line in sys.stdin:
        command = json.loads(line)
        started, modules = timing._perf_counter(), len(sys.modules)
        try:
            result = getattr(stages, command["op"].replace("-", "_"))(side, command)
            answer = {"ok": True, **(result or {})}
        except BaseException as error:  # the candidate may raise anything, SystemExit included
            answer = {"ok": False, "error": f"{type(error).__name__}: {error}"[-8000:],
                      "traceback": traceback.format_exc()[-8000:]}
            if side.builder is not None:
                answer["extensions"] = [e.to_dict() for e in side.builder.extensions]
        # Where a stage's time went, for benchmarks: this command alone, and how many modules it imported.
        answer["worker"] = {"seconds": timing._perf_counter() - started, "imported": len(sys.modules) - modules,
                            "warm_up_seconds": warm_seconds, "warm_up_error": warm}
        reply.write(json.dumps(answer) + "\n")
        reply.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
