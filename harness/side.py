"""What one worker process keeps between its parent's commands: its side of the check (reference or solution).

Below both the stages (which fill it) and the worker's loop (which owns it), so neither imports the other for it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from typing import Any

import torch

from dice_lsp.harness.memory import HELD_BYTES
from dice_lsp.harness.options import Options


@dataclasses.dataclass
class RunState:
    """What `stages.run` keeps between its calls of one check (a check whose trials do not fit the GPU together runs
    them a call each)."""
    reference: Any  # the reference's module, for its get_inputs
    census: dict[str, str]  # threads and processes known not to be the solution's
    seen: dict[str, str]  # the census once ModelNew was built
    held: list[list[Any]] | None = dataclasses.field(default_factory=list)  # trials' inputs kept alive
    room: int = HELD_BYTES  # what more `held` may take
    first: list[Any] | None = None  # the first trial's inputs, changed in place by the last call
    made: set[str] = dataclasses.field(default_factory=set)  # where the inputs were made ("device", "host")


class Side:
    """The state one worker keeps between commands."""

    def __init__(self) -> None:
        self.module: Any = None
        self.model: Any = None
        self.compiled: Any = None  # the reference under torch.compile, made by the first compile timing round
        self.device: Any = None
        self.trials: list[tuple[int, Any]] = []  # (seed, inputs); a reference's inputs are None when not kept
        self.expected: list[Any] = []  # reference: each trial's expected outputs, None when not kept
        self.expected_changed: Any = None
        self.options: Options | None = None  # from the build or reference command
        self.builder: Any = None
        # Sends an interim reply (a build request, a timed call's end) and returns the caller's answer from stdin;
        # the worker's loop sets it
        self.exchange: Any = None
        self.outputs: Any = None  # the solution's last outputs, until the reference worker has compared them
        self.changed_trial: tuple[int, Any] = (0, None)  # reference: the changed inputs' (seed, inputs or None)
        self.run: RunState | None = None  # solution: what `stages.run` keeps between its calls of one check
        self.trial_bytes = 0  # one trial's inputs and outputs, as far as measured: for an out-of-memory message
        self.timed_check: Any = None  # the check that `timed_inputs` were copied for
        self.timed_inputs: Any = None  # one check's copies of the first trial's inputs (timing.placements)
        self.census: dict[str, str] | None = None  # solution: threads and processes known not to be the solution's
        self.bases: list[list[Any]] = []  # the trials' inputs the timed calls mix (timing.Watch)
        self.staging: Any = None  # where a watched round stages each call's outputs (timing.Staging)
        self.staging_view: Any = None  # reference (GPU): the solution's staging buffer, opened by CUDA IPC
        self.snapshots: dict[int, Any] = {}  # reference (GPU): copies of kept timed calls' staged outputs, by slot
        self.itself: Any = None  # reference: (disagreement with itself, inputs it writes into), found once
        self.work: Any = None  # who did forward's work (runtime.work); a reference's is found once
        self.verified: Any = None  # the solution's: its first trial's outputs, sampled (verify.sample)


def load_module(path: str, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def pick_device(choice: str) -> torch.device:
    if choice == "cpu" or (choice == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError(f"device {choice!r} asked for, but torch sees no CUDA GPU")
    device = torch.device("cuda" if choice == "auto" else choice)
    if device.index is None:  # set_device needs an index on older torch
        device = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(device)
    return device
