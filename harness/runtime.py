"""What the solution's forward actually did at run time, for the inspect stage (kernels launched, who did the work,
threads and processes it started, TF32 switches).

Profiler kernel names are mangled or demangled C++ names; a kernel of the solution is found by its function name.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import re
import resource
import sys
import threading
import time
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

from dice_lsp.harness import samples
from torch.autograd import DeviceType
from torch.autograd.profiler import profile as autograd_profile
from torch.autograd.profiler import record_function  # loaded with torch: no cost of its own

_thread_time = time.thread_time  # bound at import, before any candidate's code runs
_getrusage, _THREAD = resource.getrusage, resource.RUSAGE_THREAD


def _thread_faults() -> int:
    """Page faults of the calling thread so far (minor: a fresh page the kernel zeroes and maps)."""
    return _getrusage(_THREAD).ru_minflt


def precision_state() -> dict[str, Any]:
    return {"tf32": bool(torch.backends.cuda.matmul.allow_tf32), "cudnn_tf32": bool(torch.backends.cudnn.allow_tf32),
            "matmul_precision": torch.get_float32_matmul_precision()}


def set_precision(tf32: bool, cudnn_tf32: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = cudnn_tf32


def names_kernel(profiler_name: str, function: str) -> bool:
    """Is `function` the kernel behind this profiler name? ("void add_kernel<float>(float*)", "_Z10add_kernelPf")"""
    name = re.escape(function)
    if re.search(rf"(?:^|[^A-Za-z0-9_]){name}(?:$|[^A-Za-z0-9_])", profiler_name):
        return True
    return bool(re.search(rf"(?<!\d){len(function)}{name}", profiler_name))  # Itanium mangling: <length><name>


def thread_count() -> int:
    """This process's threads now, as the kernel counts them (/proc/self/stat): every thread, however started
    (`threading`, `_thread`, C++), cheap enough to read after every timed call."""
    try:
        with open("/proc/self/stat", "rb") as stat:
            return int(stat.read().rsplit(b")", 1)[1].split()[17])
    except (OSError, IndexError, ValueError):
        return threading.active_count()


def _descendants() -> dict[int, str]:
    """Live processes below this one (zombies left out), by pid, with their command lines."""
    return {pid: samples.proc_text(f"/proc/{pid}/cmdline")[:80] or samples.proc_text(f"/proc/{pid}/comm")
            for pid in samples.descendants(os.getpid())}


def census() -> dict[str, str]:
    """Every thread of this process and every live process below it: "thread <tid>" / "process <pid>" to a name.

    Read from /proc, so threads started with `_thread` or from C++ count as much as `threading`'s, and processes
    that left their session (setsid, double fork) still count once this process is their subreaper (`baseline`)."""
    python = {t.native_id: t.name for t in threading.enumerate()}
    found = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        tids = []
    for tid in tids:
        name = python.get(int(tid)) or samples.proc_text(f"/proc/self/task/{tid}/comm")
        found[f"thread {tid}"] = name
    found.update({f"process {pid}": command for pid, command in _descendants().items()})
    return found


def baseline(device: str) -> dict[str, str]:
    """The census before any code of the candidate's runs, with torch's own threads already started: its
    intra-op pool (a parallel reduction) and, for a GPU check, the CUDA context's. This process becomes the
    subreaper of everything it starts, so an orphaned grandchild stays countable here."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass
    torch.ones(1 << 20).sum()
    if device != "cpu" and torch.cuda.is_available():
        torch.empty(1, device="cuda" if device == "auto" else device)
    return census()


def started_since(before: dict[str, str], *seen: dict[str, str]) -> dict[str, str]:
    """What the census has now that `before` (and every census in `seen`) did not."""
    known = set(before).union(*seen)
    return {key: name for key, name in census().items() if key not in known}


LIBRARY_NAMESPACES = ("aten", "prim", "prims", "quantized", "mkldnn", "cudnn", "inductor", "triton")


class _Lines(TorchFunctionMode):
    """Every PyTorch call forward makes from Python, labelled as a profiler range ("dice::line:N") with the line of
    `file` (the solution's) that made it: the library's share of the work then has a place in the file.
    The mode is off inside its own handler, so only the outermost call of each is labelled."""

    def __init__(self, file: str) -> None:
        super().__init__()
        self.file = file

    def __torch_function__(self, func, types, args=(), kwargs=None):
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename != self.file:
            frame = frame.f_back
        with record_function(f"dice::line:{frame.f_lineno if frame is not None else 0}"):
            return func(*args, **(kwargs or {}))


def _library(name: str) -> bool:
    return "::" in name and name.split("::", 1)[0] in LIBRARY_NAMESPACES


def _line(event: Any) -> int:
    """The solution's line a profiler event was called from (0: not from a line of its own: from C++)."""
    while event is not None and not event.name.startswith("dice::forward"):
        if event.name.startswith("dice::line:"):
            return int(event.name.rsplit(":", 1)[1])
        event = event.cpu_parent
    return 0


def _top_library_ops(events: list[Any]) -> list[tuple[Any, Any]]:
    """The library operators forward called itself (from Python or from the extension's C++), not the operators
    those called in turn, each with the "dice::forward" range it ran in."""
    found = []
    for event in events:
        if not _library(event.name):
            continue
        parent, inner = event.cpu_parent, False
        while parent is not None and parent.name != "dice::forward":
            inner = inner or _library(parent.name)
            parent = parent.cpu_parent
        if parent is not None and not inner:
            found.append((event, parent))
    return found


def _calm(events: list[Any]) -> tuple[list[Any], float]:
    """The profiled forwards (CPU) no longer than their median, and the profiler's own cost of a range (the
    median `EMPTY` one), which is no part of forward's time. A forward the scheduler paused (another job on the
    cores) is long, and the pause lands on whichever of its parts was running, so its shares say little. Seen in
    CI: one such pause in forward's own Python made a PyTorch fallback's operators 49 % of the time, not 90 %."""
    forwards = [e for e in events if e.name == "dice::forward"]
    empty = sorted(e.cpu_time_total for e in events if e.name == EMPTY)
    cost = empty[(len(empty) - 1) // 2] if empty else 0.0
    if not forwards:
        return [], cost
    median = sorted(e.cpu_time_total for e in forwards)[(len(forwards) - 1) // 2]
    return [e for e in forwards if e.cpu_time_total <= median], cost


EMPTY = "dice::empty"  # on the CPU: a range with nothing in it, the profiler's own cost of one
MARKER = "spin_kernel"  # torch.cuda._sleep's kernel: `_profile`'s marker of forward's own stream, in no share


def _profile(forward: Callable[[], Any], cuda: bool, repeats: int,
             file: str | None) -> tuple[Any, list[tuple[float, int]]]:
    """The profiler's events over `repeats` forwards, each inside a "dice::forward" range; with `file`, every
    PyTorch call labelled with its line there (`_Lines`, which costs host time of its own). Also the thread's CPU
    seconds and page faults of each forward inside its range."""
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    spent = []
    # torch.autograd's profiler, not torch.profiler's: the latter's start asks `hasattr(torch, "_inductor")`,
    # which imports torch.compile's modules (2-4 s in a CPU worker, which never needs them)
    # use_kineto on a GPU: the kernels' own events (names, times, streams) come from CUPTI; the autograd profiler's
    # default there times each operator with CUDA events and names no kernel at all (H200, torch 2.11: a raw
    # <<<>>> launch's time went to the operator before it, and the solution's own kernels "never launched")
    with autograd_profile(use_cpu=True, use_device="cuda" if cuda else None, use_kineto=cuda) as prof:
        if cuda:  # a marker (MARKER) on the stream forward is called on, which the timer's events are recorded on
            torch.cuda._sleep(1)
        else:  # the profiler's first events cost it 100+ us of its own (the CPU's own-code row): outside any range
            forward()
            for _ in range(repeats):  # what a range costs with nothing in it, taken off each forward's (`_calm`)
                with record_function(EMPTY):
                    pass
        for _ in range(repeats):
            with record_function("dice::forward"), (_Lines(file) if file else contextlib.nullcontext()):
                started, faulted = _thread_time(), _thread_faults()
                forward()
                spent.append((_thread_time() - started, _thread_faults() - faulted))
        sync()
    return prof, spent


def _cpu_ms(forward: Callable[[], Any], repeats: int) -> tuple[float, int]:
    """The fewest seconds of the thread's CPU time one of `repeats` forwards took, with no profiler on, and that
    forward's page faults: a forward that turned to other work once it saw the profiler
    (`findings.profiled_differently`) shows it here."""
    spent = []
    for _ in range(repeats):
        started, faulted = _thread_time(), _thread_faults()
        forward()
        spent.append((_thread_time() - started, _thread_faults() - faulted))
    return min(spent)


def work(forward: Callable[[], Any], own: list[str], file: str, device: torch.device,
         repeats: int = 3) -> dict[str, Any]:
    """Who did forward's work: on a GPU each kernel's share of its device time, the solution's own kernels marked
    (`own`: their function names); on the CPU each PyTorch operator's share of its CPU time, the rest being the
    solution's own code (its extension's C++ and its Python). `lines`: the library's time by the line of `file`
    that called it (0: called from C++). Shares are of forward's time over `repeats` profiled forwards; on the CPU
    the lines come from a second pass, so that labelling them adds nothing to the shares' own-code time."""
    cuda = device.type == "cuda"
    with torch.no_grad():
        forward()
        if cuda:
            torch.cuda.synchronize()
        prof, spent = _profile(forward, cuda, repeats, file if cuda else None)
        plain = (0.0, 0) if cuda else _cpu_ms(forward, 2)  # as forward runs when timed: no profiler on
        labelled = prof if cuda else _profile(forward, cuda, repeats, file)[0]
    events = list(labelled.function_events)
    rows = _kernel_rows(prof, own, repeats) if cuda else _operator_rows(list(prof.function_events))
    lines: dict[int, dict[str, Any]] = {}
    if cuda:
        for event in events:
            if event.name.startswith("dice::line:") and event.device_time_total > 0:
                entry = lines.setdefault(_line(event), {"time_us": 0.0, "names": set()})
                entry["time_us"] += event.device_time_total / repeats
                entry["names"].update(_kernel_names(event))
        total = sum(r["time_us"] for r in rows)
    else:
        calm, cost = _calm(events)
        kept = {id(e) for e in calm}
        for event, within in _top_library_ops(events):
            if id(within) in kept:
                entry = lines.setdefault(_line(event), {"time_us": 0.0, "names": set()})
                entry["time_us"] += event.cpu_time_total / len(calm)
                entry["names"].add(event.name)
        total = max(sum(e.cpu_time_total for e in calm) / max(len(calm), 1) - cost, 0.0)
    calls = [{"line": line, "names": tuple(sorted(entry["names"])), "time_us": entry["time_us"],
              "share": entry["time_us"] / (total or 1.0)} for line, entry in lines.items()]
    calls.sort(key=lambda c: -c["time_us"])
    # forward's device time on a GPU (its kernels', not inflated by the profiler), its CPU time on the CPU
    fewest = min(spent) if spent else (0.0, 0)
    profiled = sum(r["time_us"] for r in rows) / 1e3 if cuda else fewest[0] * 1e3
    return {"rows": rows, "lines": calls, "own_share": sum(r["share"] for r in rows if r["own"]),
            "streams": _streams(list(prof.function_events)) if cuda else 0, "profiled_ms": profiled,
            "plain_ms": plain[0] * 1e3, "profiled_faults": 0 if cuda else fewest[1], "plain_faults": plain[1]}


def page_cost_us(pages: int = 1024, repeats: int = 5) -> float:
    """The fewest microseconds of this thread's CPU time a fresh page took to fault in and fill, over `repeats`
    buffers of `pages` pages each: what an honest forward pays for each page of a new output the allocator did not
    have at hand (glibc maps and unmaps large blocks by its own history, so one stage of calls can fault where
    another did not: the C++ example's 8 MB output cost 4 ms a call faulting and 0.6 ms not, 2-core machine)."""
    best = float("inf")
    for _ in range(repeats):
        with mmap.mmap(-1, pages * mmap.PAGESIZE) as fresh:  # never touched: every page faults once
            view = torch.frombuffer(fresh, dtype=torch.uint8)
            started, faulted = _thread_time(), _thread_faults()
            view.fill_(1)
            spent, faults = _thread_time() - started, _thread_faults() - faulted
            del view
        if faults >= pages // 2:
            best = min(best, spent * 1e6 / faults)
    return 0.0 if best == float("inf") else best


def _streams(events: list[Any]) -> int:
    """How many CUDA streams forward's kernels ran on (copies, fills and our ranges left out), counting the stream
    forward was called on, which the timer's events see: `_profile` launches a marker kernel there first. So a
    forward whose every kernel runs on a stream of its own counts two, as one that splits its work does."""
    found = set()
    for event in events:
        if getattr(event, "device_type", None) != DeviceType.CUDA or event.name.startswith(("Memcpy", "Memset",
                                                                                             "dice::")):
            continue
        found.add(getattr(event, "device_resource_id", None))
    return len(found)


def _kernel_names(event: Any) -> set[str]:
    names = {kernel.name for kernel in getattr(event, "kernels", ())}
    for child in event.cpu_children:
        names |= _kernel_names(child)
    return names


def _kernel_rows(prof: Any, own: list[str], repeats: int) -> list[dict[str, Any]]:
    """Each GPU kernel's share of forward's device time, marking the solution's own kernels."""
    rows = []
    for event in prof.key_averages():
        time_us = float(getattr(event, "self_device_time_total", 0.0) or getattr(event, "self_cuda_time_total", 0.0))
        if time_us <= 0 or event.key.startswith("dice::") or names_kernel(event.key, MARKER):
            continue
        match = next((name for name in own if names_kernel(event.key, name)), None)
        rows.append({"name": match or event.key, "time_us": time_us / repeats, "launches": event.count // repeats,
                     "own": match is not None})
    return _shares(rows)


def _operator_rows(events: list[Any]) -> list[dict[str, Any]]:
    """On the CPU: each library operator forward called (itself or from its extension), and one row for the rest of
    forward's time, the solution's own code; over the calm forwards only (`_calm`)."""
    calm, cost = _calm(events)
    kept, count = {id(e) for e in calm}, max(len(calm), 1)
    total = max(sum(e.cpu_time_total for e in calm) / count - cost, 0.0)
    rows: dict[str, dict[str, Any]] = {}
    for event, within in _top_library_ops(events):
        if id(within) not in kept:
            continue
        row = rows.setdefault(event.name, {"name": event.name, "time_us": 0.0, "launches": 0, "own": False})
        row["time_us"] += event.cpu_time_total / count
        row["launches"] += 1
    library = sum(r["time_us"] for r in rows.values())
    for row in rows.values():
        row["launches"] = row["launches"] // count
    own = {"name": "forward's own code", "time_us": max(total - library, 0.0), "launches": 1, "own": True}
    return _shares([own, *rows.values()])


def _shares(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    total = sum(r["time_us"] for r in rows) or 1.0
    for row in rows:
        row["share"] = row["time_us"] / total
    rows.sort(key=lambda r: -r["time_us"])
    return rows
