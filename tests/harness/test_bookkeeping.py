"""Attacks on the check's own bookkeeping, run for real on the CPU (GPU analogues at the end): a candidate runs in
its worker's process and can read, patch and signal anything there, so each of these reaches for state the verdict
once rested on (the clock's scope, the copy of an output, the record of which inputs a call had, the draw of which
calls are checked, the profiler's outcome, the CPU between commands). None may come out `correct` and faster than
the honest kernel without an error or warning finding.

Every candidate is the shared C++-only fixture extension (`add_solution.py`, one build for the session).
"""

from __future__ import annotations

import pytest

from dice_lsp import harness
from dice_lsp.harness.report import Report

pytestmark = pytest.mark.slow

NOT_DECEPTION = ("timing-unstable", "unsandboxed")  # about the machine, not the candidate
HONEST = ["return self.ext.add_values(a, b)"]


def flagged(report: Report) -> dict[str, str]:
    return {f.code: f.message for f in report.findings
            if f.severity in ("error", "warning") and f.code not in NOT_DECEPTION}


def check(files, options, body: list[str], prelude: str = "") -> Report:
    """The check of a solution whose forward is `body`; it must get as far as comparing outputs, so that an attack's
    test cannot pass on a build or start that failed for another reason."""
    report = harness.check(files.text("add_reference.py"), files.solution("\n        ".join(body), prelude),
                           options)
    assert report.status in ("correct", "mismatch"), (report.summary(), report.message, (report.log or "")[-2000:])
    return report


@pytest.fixture(scope="module")
def honest(files, options) -> Report:
    report = check(files, options, HONEST)
    assert report.status == "correct" and not flagged(report), (report.summary(), report.findings)
    return report


def harmless_or_flagged(report: Report, honest: Report) -> None:
    """Flagged (an error or warning, no clean `correct`), or no faster than the honest kernel: its median at least a
    third of the honest one's (the honest kernel and an attack that does the same work differ by scheduling only;
    each attack below reported 5-27x the honest speed when it worked)."""
    if report.status != "correct" or flagged(report):
        return
    ours, theirs = report.timings["solution"].median_ms, honest.timings["solution"].median_ms
    assert ours >= theirs / 3, (f"{report.summary()}: {ours:.4f} ms against the honest kernel's {theirs:.4f} ms",
                                report.findings)

# The same inputs twice in a row (as the inspect stage's profiled and plain forwards get them) answer from memory:
# so forward is as quick when watched as when timed, and only the timed calls' own outputs can tell on it
MEMO = """import torch as _torch


def _remember(model, a, b, compute):
    last = getattr(model, "_last", None)
    if last is not None and _torch.equal(last[0], a) and _torch.equal(last[1], b):
        return last[2]
    out = compute(a, b)
    model._last = (a.clone(), b.clone(), out)
    return out
"""


HELPER_THREAD = [
    "box = []",
    "helper = __import__('threading').Thread(target=lambda: box.append(self.ext.add_values(a, b)))",
    "helper.start()",
    "helper.join()",
    "return box[0]"]


def test_work_on_a_thread_started_and_joined_inside_the_call_is_counted(files, options, honest):
    """The forward's loop runs on a thread that begins and ends inside the call: the calling thread's CPU clock saw
    none of it, and a thread that has ended is in no census. The process's CPU time, ended threads included, is."""
    report = check(files, options, HELPER_THREAD)
    assert report.status == "correct", report.summary()
    ours, theirs = report.timings["solution"].median_ms, honest.timings["solution"].median_ms
    assert ours >= theirs / 3, (f"{ours:.4f} ms against the honest kernel's {theirs:.4f} ms", report.findings)


CLONE_HOOK = """import sys as _sys
import torch
_real_clone = torch.Tensor.clone
_owed = {}


def _timed():
    # a timed call: measure's loop over them is on the stack, and the profiler is off
    frame = _sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "measure":
            return "k" in frame.f_locals and not torch.autograd._profiler_enabled()
        frame = frame.f_back
    return False


def _clone(self, *args, **kwargs):
    job = _owed.pop(self.data_ptr(), None)
    if job is not None:  # a copy the harness takes: the real answer, computed now, outside any timed call
        return _real_clone(job[1](job[2], job[3]), *args, **kwargs)
    return _real_clone(self, *args, **kwargs)


type.__setattr__(torch.Tensor, "clone", _clone)
"""
CLONE_BODY = [
    "if not _timed():",
    "    return _remember(self, a, b, self.ext.add_values)",
    "out = torch.empty_like(a)",
    "_owed[out.data_ptr()] = (out, self.ext.add_values, _real_clone(a), _real_clone(b))",
    "return out"]


def test_a_patched_tensor_clone_that_computes_the_answer_when_copied_is_caught(files, options, honest):
    """Every call returns an empty tensor and owes the answer to whoever copies it: torch.Tensor.clone is patched
    (through type.__setattr__, which no static finding sees) to compute it then. The outputs the verdict rests on
    are copied by functions bound before the candidate's code ran, so the copy is of the empty tensor."""
    report = check(files, options, CLONE_BODY, MEMO + CLONE_HOOK)
    assert report.status != "correct" or flagged(report), (report.summary(), report.findings)
    assert report.speedup_eager is None or report.status != "correct", report.summary()


RELABEL = [
    "frame, record = __import__('sys')._getframe(1), None",
    "while frame is not None and frame.f_code.co_name != 'measure':",
    "    frame = frame.f_back",
    "if frame is not None and 'k' in frame.f_locals:  # a timed call: the harness's record of its inputs",
    "    record = next((v for v in frame.f_locals.values() if hasattr(v, 'last') and hasattr(v, 'bases')), None)",
    "if record is None or torch.autograd._profiler_enabled():  # not timed",
    "    return _remember(self, a, b, self.ext.add_values)",
    "if getattr(self, 'round', None) is not record:  # a round's first timed call: the one computed",
    "    self.round, self.first = record, (self.ext.add_values(a, b), record.last)",
    "    return self.first[0]",
    "record.last = self.first[1]  # this call's inputs were the round's first call's, says the record now",
    "return self.first[0]"]


def test_relabelling_the_record_of_inputs_from_a_frame_is_caught(files, options, honest):
    """The forward computes once, then returns that output for every later call and rewrites the record of which
    inputs each call had, so a check that trusts the record compares the output with the first call's inputs.
    The record is the caller's, in another process."""
    report = check(files, options, RELABEL, MEMO)
    harmless_or_flagged(report, honest)
    assert report.status != "correct" or report.speedup_eager is None or "timed-mismatch" in flagged(report) or \
        report.timings["solution"].median_ms >= honest.timings["solution"].median_ms / 3, report.summary()


REBOUND_DRAW = [
    "timing = __import__('sys').modules['dice_lsp.harness.timing']",
    "frame, call = __import__('sys')._getframe(1), None",
    "while frame is not None and call is None:",
    "    call = frame.f_locals.get('k') if frame.f_code.co_name == 'measure' else None",
    "    frame = frame.f_back",
    "if call is None or call < 2 or torch.autograd._profiler_enabled():  # trials, warm-up, sure keeps",
    "    return _remember(self, a, b, self.ext.add_values)",
    "draw = getattr(timing, '_below', None)",
    "if draw is not None:  # for one use: no later call takes a kept slot",
    "    def once(count, real=draw):",
    "        timing._below = real",
    "        return count",
    "    timing._below = once",
    "return torch.empty_like(a)"]


def test_steering_which_timed_calls_are_checked_is_caught(files, options, honest):
    """The forward computes only the calls a reservoir always keeps and rebinds the draw, for one use at a time,
    so that no later call is kept. Which calls are checked is drawn by the caller after each call's outputs are
    out of the candidate's reach."""
    report = check(files, options, REBOUND_DRAW, MEMO)
    assert report.status != "correct" or flagged(report), (report.summary(), report.findings)
    assert report.speedup_eager is None or report.status != "correct"


FAILING_INSPECT = [
    "if torch.autograd._profiler_enabled():",
    "    raise RuntimeError('not while profiled')",
    "self.ext.add_values(a[:1, :1].contiguous(), b[:1, :1].contiguous())  # its kernel, on one element",
    "return getattr(torch, 'a' + 'dd')(a, b)"]


def test_a_forward_that_raises_under_the_profiler_is_an_error_and_no_speedup(files, options):
    """PyTorch does the work while timed; under the profiler forward raises, so the stage that would see PyTorch
    doing it never finishes. A stage that fails is an error finding, and no speedup."""
    report = check(files, options, FAILING_INSPECT)
    assert "inspect-failed" in flagged(report), (report.summary(), report.findings)
    assert flagged(report)["inspect-failed"].startswith("the inspect stage failed: RuntimeError: not while profiled")
    assert report.speedup_eager is None


BACKGROUND = """import signal as _signal
import time as _time


def _stream(signum, frame):  # 50 ms of work each time the timer fires, whatever the worker does
    end = _time.thread_time() + 0.05
    total = 0
    while _time.thread_time() < end:
        total += sum(range(1000))


_signal.signal(_signal.SIGALRM, _stream)
_signal.setitimer(_signal.ITIMER_REAL, 0.25, 0.25)
"""


def test_cpu_burned_between_commands_is_reported(files, options):
    """A SIGALRM handler works while the worker waits for its next command (here while a slow reference is built and
    makes its outputs), on a shared machine slowing whatever else runs: eager's timing among it. Its CPU while
    it waits is counted and reported, and the worker is stopped while another side is timed. An honest worker
    waits on its pipe."""
    slow = files.text("add_reference.py").replace("super().__init__()", "super().__init__()\n        __import__('time').sleep(3)")
    report = harness.check(slow, files.solution(HONEST[0], BACKGROUND), options)
    found = flagged(report).get("background-cpu", "")
    assert "between its commands" in found and report.background_cpu_ms > 200, (report.summary(), report.findings)
    honest = harness.check(slow, files.solution(HONEST[0]), options)
    assert "background-cpu" not in flagged(honest) and honest.background_cpu_ms < 100, honest.background_cpu_ms


# Long beside the add itself: the flag wants a wall median over 3x the CPU median plus 1 ms, and this C++ add (7x
# slower than eager) took 2.7 ms of CPU a call on the 2-core machine under a CI run's load, where 5 ms did not do
SLEEPS = ["__import__('time').sleep(0.03)", "return self.ext.add_values(a, b)"]


def test_a_round_whose_wall_time_is_far_above_its_cpu_time_is_flagged(files, options):
    """On the CPU the samples are the process's CPU time; a forward whose wall time is far above it waited for
    something the clock does not see."""
    report = check(files, options, SLEEPS)
    found = flagged(report).get("wall-time", "")
    assert "wall time" in found and "CPU time" in found, (report.summary(), report.findings, report.timings)


# -- the same on a GPU ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gpu(options):
    return options.with_(device="auto", baseline="eager", timing_trials=100, warmup_trials=10)


def _cuda(files, body: list[str], prelude: str = "") -> str:
    forward = "\n".join("        " + line for line in body)
    return prelude + files.text("cuda_solution.py").replace("        return self.add.add_cuda(a, b)", forward)


def _gpu_check(files, gpu, body: list[str], prelude: str = "") -> Report:
    return harness.check(files.text("add_reference.py").replace("512, 512", "2048, 2048"),
                         _cuda(files, body, prelude), gpu)


@pytest.fixture(scope="module")
def gpu_honest(files, gpu) -> Report:
    report = _gpu_check(files, gpu, ["return self.add.add_cuda(a, b)"])
    assert report.status == "correct" and report.speedup_eager is not None, (report.summary(), report.findings)
    return report


@pytest.mark.gpu
@pytest.mark.parametrize("body, prelude", [
    ([line.replace("self.ext.add_values", "self.add.add_cuda") for line in CLONE_BODY], MEMO + CLONE_HOOK),
    ([line.replace("self.ext.add_values", "self.add.add_cuda") for line in RELABEL], MEMO),
    ([line.replace("self.ext.add_values", "self.add.add_cuda") for line in REBOUND_DRAW], MEMO),
], ids=["clone-hook", "relabel", "rebound-draw"])
def test_on_a_gpu_bookkeeping_attacks_are_caught(files, gpu, gpu_honest, body, prelude):
    """Caught: a mismatch, a finding with no speedup, or flagged and no faster than the honest kernel. The last is
    where the relabel ends since the record of inputs left the worker: it finds no record to rewrite, so it answers
    every call from memory after comparing the inputs with the last (aten::equal), which is slower than the honest
    kernel (0.11x against eager on the H100 of 2026-12-07), and the profile says PyTorch did the work."""
    report = _gpu_check(files, gpu, body, prelude)
    # It ran on the GPU and got past verify (on the H100 of 2026-12-07, "built, not run: no GPU" passed here)
    assert report.status in ("correct", "mismatch") and report.device not in ("", "cpu"), report.summary()
    if report.status == "mismatch" or report.speedup_eager is None and flagged(report):
        return
    assert flagged(report), (report.summary(), report.findings)
    ours, theirs = report.timings["solution"].median_ms, gpu_honest.timings["solution"].median_ms
    assert ours >= theirs / 3, (f"{report.summary()}: {ours:.4f} ms against the honest kernel's {theirs:.4f} ms",
                                report.findings)  # as harmless_or_flagged holds them on the CPU


@pytest.mark.gpu
def test_on_a_gpu_a_forward_that_raises_under_the_profiler_is_an_error(files, gpu):
    body = ["if torch.autograd._profiler_enabled():",
            "    raise RuntimeError('not while profiled')",
            "dummy = torch.ones(32, device=a.device)",
            "self.add.add_cuda(dummy, dummy)",
            "return getattr(torch, 'a' + 'dd')(a, b)"]
    report = _gpu_check(files, gpu, body)
    assert "inspect-failed" in flagged(report) and report.speedup_eager is None, (report.summary(), report.findings)
