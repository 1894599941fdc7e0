"""The harness's own code and clocks as they were before any code of the candidate's ran in this worker, and what
has changed since: a candidate that rebinds the timer, a stage or a clock through `sys.modules` is seen doing it.

Tamper-evidence, not a wall: code in the same process can hide from any check made in it. What it cannot hide from
is the caller's clock and its account of the worker's CPU (`samples.outside_clock`, `samples.hidden_cpu`) and the
reference's outputs on the caller's draws, compared with copies taken out of its reach (`rounds.TimeStage`).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import types
from typing import Any

import torch

HARNESS = ("timing", "stages", "timed", "verify", "runtime", "samples", "side", "messages", "integrity")
PACKAGE = "dice_lsp.harness"


def _clocks() -> dict[str, Any]:
    """What the timing depends on outside the harness, by the name a message shows."""
    event = torch.cuda.Event
    return {"time.perf_counter": time.perf_counter, "time.perf_counter_ns": time.perf_counter_ns,
            "time.monotonic": time.monotonic, "os.urandom": os.urandom, "threading.enumerate": threading.enumerate,
            "torch.cuda.synchronize": torch.cuda.synchronize, "torch.cuda.Event": event,
            "torch.cuda.Event.record": event.record, "torch.cuda.Event.elapsed_time": event.elapsed_time,
            "torch.cuda.Event.synchronize": event.synchronize, "torch.cuda._sleep": torch.cuda._sleep,
            "torch.Tensor": torch.Tensor, "torch.lerp": torch.lerp}


def _parts(value: Any) -> tuple[int, ...]:
    """What must stay the same of one bound value: the object, and for a function its code and defaults."""
    code = getattr(value, "__code__", None)
    return (id(value), id(code), id(getattr(value, "__defaults__", None))) if code is not None else (id(value),)


def _entries() -> dict[str, tuple[Any, tuple[int, ...]]]:
    found: dict[str, tuple[Any, tuple[int, ...]]] = {}
    for short in HARNESS:
        module = sys.modules.get(f"{PACKAGE}.{short}")
        if module is None:
            continue
        found[f"{short}"] = (module, (id(module),))
        for name, value in vars(module).items():
            if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
                found[f"{short}.{name}"] = (value, _parts(value))
            if isinstance(value, type) and value.__module__ == module.__name__:
                for attribute, method in vars(value).items():
                    if isinstance(method, types.FunctionType):
                        found[f"{short}.{name}.{attribute}"] = (method, _parts(method))
    for name, value in _clocks().items():
        found[name] = (value, _parts(value))
    return found


class Seal:
    """Taken when the harness's worker modules are loaded (the bottom of `stages`), and again by the worker once it
    has loaded every stage (`take`: `timed` loads after `stages`, and its stages must be sealed too), before the
    first command."""

    def __init__(self) -> None:
        self.entries = _entries()

    def take(self) -> None:
        self.entries = _entries()

    def broken(self) -> list[str]:
        """The names bound differently now, or hooks that sit between the harness and its code."""
        now = _entries()
        changed = sorted(name for name, (_, parts) in self.entries.items()
                         if name not in now or now[name][1] != parts)
        main = sys.modules.get("__main__")
        table = getattr(main, "STAGES", None)
        if isinstance(table, dict):  # the worker's command table: each stage must be the one sealed here
            sealed = {id(value) for value, _ in self.entries.values()}
            changed += [f"worker.STAGES[{getattr(k, 'tag', k)}]" for k, v in table.items() if id(v) not in sealed]
        if sys.gettrace() is not None:
            changed.append("sys.settrace")
        if sys.getprofile() is not None:
            changed.append("sys.setprofile")
        return changed
