"""Adversarial candidates, one per class of attack on the verdict or the speed (THREATS.md), run for real on CPU:
none may come out `correct` without an error or warning finding, and an honest kernel must stay clean.

Every candidate is the shared C++-only fixture extension (`add_solution.py`, one build for the session) with a
forward, and sometimes module-level code, written to cheat.
"""

from __future__ import annotations

import pytest

from dice_lsp import harness
from dice_lsp.harness.report import Report

pytestmark = pytest.mark.slow

NOT_DECEPTION = ("timing-unstable", "unsandboxed")  # about the machine, not the candidate


def flagged(report: Report) -> dict[str, str]:
    """The run-time findings that fail a robust check, by code."""
    return {f.code: f.message for f in report.findings
            if f.severity in ("error", "warning") and f.code not in NOT_DECEPTION}


def check(files, options, body: list[str], prelude: str = "", reference: str = "add_reference.py") -> Report:
    forward = "\n        ".join(body)
    return harness.check(files.text(reference), files.solution(forward, prelude), options)


def caught(report: Report) -> None:
    assert report.status != "correct" or flagged(report), report.summary()


HONEST = ["return self.ext.add_values(a, b)"]


def test_an_honest_kernel_stays_clean_and_its_timed_calls_are_checked(files, options):
    report = check(files, options, HONEST)
    assert report.status == "correct" and not flagged(report), (report.summary(), report.findings)
    assert report.speedup_eager is not None
    assert report.timings["solution"].checked == options.timing_rounds * options.timed_checks
    assert [s.name for s in report.stages] == ["parse", "build", "reference", "verify", "time", "inspect"]


SLOWED_CLOCK = """import sys
_timing = sys.modules["dice_lsp.harness.timing"]
_real = _timing._perf_counter
_timing._perf_counter = lambda: _real() * 0.5
"""
FABRICATED = """import sys
_timing = sys.modules["dice_lsp.harness.timing"]


def _measure(forward, device, trials, warmup, warm_s=0.0, before=None, after=None):
    now = _timing._perf_counter()
    fast = [0.001] * trials
    return {"median_ms": 0.001, "spread_ms": 0.0, "min_ms": 0.001, "max_ms": 0.001, "trials": trials,
            "host_median_ms": 0.001, "clock": "host", "overhead_ms": 0.0, "samples": fast, "host_samples": fast,
            "placements": 1, "starts": [now + i * 1e-6 for i in range(trials)], "loop_start": now,
            "loop_end": now + trials * 1e-6}


_timing.measure = _measure
"""
STAGE_TABLE = """import sys
from dice_lsp.harness import messages as _messages
_table = sys.modules["__main__"].STAGES
_real_time = _table[_messages.Time]


def _time(side, command):
    timed = _real_time(side, command)
    fast = tuple(s / 100 for s in timed.timing.samples)
    return type(timed)(timing=type(timed.timing)(**{**vars(timed.timing), "samples": fast, "host_samples": fast,
                                                     "median_ms": timed.timing.median_ms / 100}),
                       tf32=timed.tf32, cudnn_tf32=timed.cudnn_tf32, matmul_precision=timed.matmul_precision,
                       kept=timed.kept)


_table[_messages.Time] = _time
"""


@pytest.mark.parametrize("prelude", [SLOWED_CLOCK, FABRICATED, STAGE_TABLE], ids=["slowed", "fabricated", "table"])
def test_a_fake_clock_or_timer_is_an_error_and_no_speedup(files, options, prelude):
    report = check(files, options, HONEST, prelude)
    assert "timer-patch" in flagged(report), (report.summary(), report.findings)
    assert report.speedup_eager is None


LOOKS_AT_ITS_STACK = [
    "frame = __import__('sys')._getframe(1)",
    "while frame is not None:",
    "    if frame.f_code.co_name == 'measure' and getattr(self, 'last', None) is not None:",
    "        return self.last",
    "    frame = frame.f_back",
    "self.last = self.ext.add_values(a, b)",
    "return self.last"]
COUNTS_ITS_CALLS = [
    "self.calls = getattr(self, 'calls', 0) + 1",
    "if self.calls > 6:  # the trials are done: timing now",
    "    return self.last",
    "self.last = self.ext.add_values(a, b)",
    "return self.last"]


@pytest.mark.parametrize("body", [LOOKS_AT_ITS_STACK, COUNTS_ITS_CALLS], ids=["stack", "count"])
def test_a_forward_that_knows_when_it_is_timed_is_caught_by_the_timed_calls_checked(files, options, body):
    report = check(files, options, body)
    assert report.status == "mismatch" and "timed-mismatch" in flagged(report), report.summary()
    assert report.speedup_eager is None


LAZY = """import torch
import torch.utils._pytree as _pytree


class Lazy(torch.Tensor):
    @staticmethod
    def __new__(cls, make):
        made = torch.Tensor._make_wrapper_subclass(cls, (512, 512), dtype=torch.float32)
        made.make, made.value = make, None
        return made

    def force(self):
        if self.value is None:
            self.value = self.make()
        return self.value

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        real = lambda x: x.force() if isinstance(x, Lazy) else x
        return func(*_pytree.tree_map(real, args), **_pytree.tree_map(real, kwargs or {}))
"""


def test_a_lazy_tensor_subclass_is_an_error_and_no_speedup(files, options):
    report = check(files, options, ["return Lazy(lambda: self.ext.add_values(a, b))"], LAZY)
    assert "lazy-output" in flagged(report) and "Lazy (a torch.Tensor subclass)" in flagged(report)["lazy-output"]
    assert report.speedup_eager is None


@pytest.mark.parametrize("key", ["tuple(a.flatten()[:4].tolist() + b.flatten()[:4].tolist())",
                                 "(id(a), a._version, id(b), b._version)"], ids=["sampled-values", "identity"])
def test_a_cache_gets_no_hit_while_timed(files, options, key):
    """Every timed call's inputs have values no call had: a cache by a few values, or by identity and version
    (which passes the trial of inputs changed in place), misses, so the speed reported is the kernel's own: a hit
    would take a dictionary lookup (microseconds), the naive kernel takes milliseconds, eager under one. (A hit on
    a recycled id, a tensor of the trials freed and its id taken by a timed input, returns a stale output: caught.)"""
    report = check(files, options, [
        f"key = {key}",
        "self.cache = getattr(self, 'cache', {})",
        "if key not in self.cache:",
        "    self.cache[key] = self.ext.add_values(a, b)",
        "return self.cache[key]"])
    honest = check(files, options, HONEST)
    # The solution's own median, not the speedup: a clock finding under load (another job on the cores) withholds
    # either run's speedup, and the time the cache was measured at is what a hit would have shrunk
    slow = report.status == "correct" and (report.timings["solution"].median_ms
                                           > honest.timings["solution"].median_ms / 3)
    assert slow or report.status == "mismatch" and "timed-mismatch" in flagged(report), (
        report.summary(), report.findings, honest.summary(), honest.findings)


def test_a_cache_with_a_coarse_key_returns_stale_outputs_and_is_caught(files, options):
    report = check(files, options, [
        "key = (tuple(a.shape), bool(a.flatten()[0] > 0))",
        "self.cache = getattr(self, 'cache', {})",
        "if key not in self.cache:",
        "    self.cache[key] = self.ext.add_values(a, b)",
        "return self.cache[key]"])
    caught(report)
    assert report.status == "mismatch"


def test_pytorch_under_a_name_built_at_run_time_beside_a_kernel_on_a_dummy_is_a_fallback(files, options):
    body = ["self.ext.add_values(torch.ones(32), torch.ones(32))  # the kernel runs, on nothing that matters",
            "return getattr(torch, 'a' + 'dd')(a, b)"]
    report = check(files, options, body)
    assert "torch-fallback" in flagged(report), (report.summary(), report.findings)
    found = next(f for f in report.findings if f.code == "torch-fallback")
    assert "aten::add" in found.message and "PyTorch does the work (line" in found.message
    assert found.span.slice(files.solution("\n        ".join(body))) == body[1]  # on the line that calls it


PROFILED_ONLY = ["if torch.autograd._profiler_enabled():",
                 "    return self.ext.add_values(a, b)",
                 "return getattr(torch, 'a' + 'dd')(a, b)"]
PROFILED_ONWARDS = ["self.seen = getattr(self, 'seen', False) or torch.autograd._profiler_enabled()",
                    "if self.seen:",
                    "    return self.ext.add_values(a, b)",
                    "return getattr(torch, 'a' + 'dd')(a, b)"]


PROFILED_PRETENCE = ["if torch.autograd._profiler_enabled():  # its kernel on nothing, an answer of any kind",
                     "    self.ext.add_values(torch.ones(32), torch.ones(32))",
                     "    return torch.empty_like(a)",
                     "return getattr(torch, 'a' + 'dd')(a, b)"]


@pytest.mark.parametrize("body", [PROFILED_ONLY, PROFILED_ONWARDS, PROFILED_PRETENCE],
                         ids=["while-profiled", "from-then-on", "pretends-while-profiled"])
def test_a_forward_that_does_its_own_work_only_when_profiled_is_caught(files, options, body):
    """The inspect stage learns who did the work from torch's profiler, which a forward can see is on: these run
    their own kernel while profiled (or from then on), or launch it on nothing and return anything then, and
    PyTorch's op otherwise, so the timed calls are PyTorch's and the profile shows only their own code. Their
    forward took far longer in the inspect stage than while timed, or computed something else there: an error,
    and no speedup."""
    report = check(files, options, body)
    assert "profiled-differently" in flagged(report), (report.summary(), report.findings)
    assert report.speedup_eager is None


# Busy while profiled, for the first inspect stage's profiled forwards only (it makes 8 on the CPU: a warm-up and 3
# timed, twice), as a machine that stalls the worker's clock throughout one stage would make it look
STALLED_ONCE = ["if torch.autograd._profiler_enabled() and getattr(self, 'profiled', 0) < 8:",
                "    self.profiled = getattr(self, 'profiled', 0) + 1",
                "    spin = sum(i * i for i in range(200000))",
                "return self.ext.add_values(a, b)"]


def test_a_forward_slower_in_one_inspect_stage_only_is_inspected_again_and_not_held_to_it(files, options):
    """An honest forward whose first profiled stage was slow for a reason of the machine's, not its own, is inspected
    once more before `profiled-differently` is said; the second stage holds the code that was timed."""
    report = check(files, options, STALLED_ONCE)
    assert report.status == "correct" and "profiled-differently" not in flagged(report), (
        report.summary(), report.findings)


THREAD_AT_IMPORT = """import _thread
import time as _time
_thread.start_new_thread(_time.sleep, (600,))
"""


def test_a_thread_started_with__thread_at_import_is_reported(files, options):
    report = check(files, options, HONEST, THREAD_AT_IMPORT)
    assert "thread" in flagged(report) and "(at import)" in flagged(report)["thread"], report.findings


def test_a_process_started_in_forward_is_reported(files, options):
    report = check(files, options, [
        "if not hasattr(self, 'helper'):",
        "    self.helper = __import__('subprocess').Popen(['sleep', '60'])",
        "return self.ext.add_values(a, b)"])
    message = flagged(report).get("thread", "")
    assert "process" in message and "sleep 60" in message and "(in forward)" in message, report.findings


def test_a_forward_that_writes_its_result_into_its_input_is_reported(files, options):
    report = check(files, options, ["a.copy_(self.ext.add_values(a, b))", "return a"])
    assert "input-mutation" in flagged(report) and "input 0" in flagged(report)["input-mutation"], report.findings


def test_a_reference_that_disagrees_with_itself_is_the_references_problem(files, options, tmp_path):
    reference = files.text("add_reference.py").replace("return a + b", "return a + b + torch.randn_like(a)")
    report = harness.check(reference, files.solution("return self.ext.add_values(a, b)"), options)
    assert report.status == "invalid" and "the reference disagrees with itself" in report.message, report.summary()


@pytest.mark.parametrize("change, says", [
    (("def get_inputs():", "def get_inputs(:"), "the reference has a syntax error: line"),
    (("import torch.nn as nn", "import torch.nn as nn\nimport no_such_module_here"),
     "importing the reference failed: ModuleNotFoundError"),
])
def test_a_reference_that_does_not_import_says_why(files, options, change, says):
    reference = files.text("add_reference.py").replace(*change)
    report = harness.check(reference, files.solution("return self.ext.add_values(a, b)"), options)
    assert report.status == "invalid" and report.message.startswith(says), report.message


@pytest.fixture(scope="module")
def gpu(options):
    return options.with_(device="auto", baseline="eager", timing_trials=100, warmup_trials=10)


def _cuda(files, forward: str) -> str:
    return files.text("cuda_solution.py").replace("        return self.add.add_cuda(a, b)", forward)


@pytest.mark.gpu
def test_on_a_gpu_an_honest_kernel_is_clean_and_its_timed_calls_are_checked(files, gpu):
    report = harness.check(files.text("add_reference.py"), files.text("cuda_solution.py"), gpu)
    assert report.status == "correct", report.summary() + report.log
    assert set(flagged(report)) == {"kernel-not-launched"}, report.findings  # the fixture's unused_kernel
    assert report.timings["solution"].checked == gpu.timing_rounds * gpu.timed_checks
    assert report.speedup_eager is not None


@pytest.mark.gpu
def test_on_a_gpu_pytorch_under_a_run_time_name_beside_a_kernel_on_a_dummy_is_a_fallback(files, gpu):
    reference = files.text("add_reference.py").replace("512, 512", "4096, 4096")
    solution = _cuda(files, "        dummy = torch.ones(32, device=a.device)\n"
                            "        self.add.add_cuda(dummy, dummy)\n"
                            "        return getattr(torch, 'a' + 'dd')(a, b)")
    report = harness.check(reference, solution, gpu)
    assert report.status == "correct", report.summary() + report.log
    found = next((f for f in report.findings if f.code == "torch-fallback"), None)
    assert found is not None and found.severity == "warning", report.findings
    own = [k for k in report.kernels if k.own]
    assert own and sum(k.share for k in own) < 0.1, report.kernels  # the kernel ran, on nothing that matters


@pytest.mark.gpu
def test_on_a_gpu_work_on_a_side_stream_under_a_run_time_name_is_caught(files, gpu):
    """The kernel launched on PyTorch's current stream, made a side stream under a name built at run time. (The
    fixture's own launch, `<<<grid, block>>>`, goes to the legacy default stream whatever PyTorch's current one is:
    on the H100 on 2026-12-07 this test launched it so, its work stayed on the timed stream, and nothing was there
    to catch.)"""
    current = "add_kernel<<<(size + block - 1) / block, block, 0, at::cuda::getCurrentCUDAStream()>>>"
    solution = _cuda(files, "        stream = getattr(torch.cuda, 'Str' + 'eam')()\n"
                            "        with torch.cuda.stream(stream):\n"
                            "            out = self.add.add_cuda(a, b)\n"
                            "        return out")
    solution = solution.replace("add_kernel<<<(size + block - 1) / block, block>>>", current).replace(
        "#include <cuda_runtime.h>", "#include <cuda_runtime.h>\n#include <ATen/cuda/CUDAContext.h>", 1)
    assert current in solution
    report = harness.check(files.text("add_reference.py"), solution, gpu)
    assert {"side-stream", "timer-mismatch", "timed-mismatch"} & set(flagged(report)), report.findings
