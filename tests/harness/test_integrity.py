"""The rules that keep a candidate from faking its verdict or its speed, each without running a check: the caller's
clock against the worker's readings, fresh inputs for timed calls from the caller's draws, outputs staged with
functions bound before the candidate's code, plain outputs, the harness sealed against rebinding, who did the work,
the whole process's CPU, and the reference's own failures named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import torch

from dice_lsp.anatomy.types import Span
from dice_lsp.harness import findings, integrity, samples, timing, verify
from dice_lsp.harness.messages import Inspected, LibraryLine, Output, TrialResult, TimedCall
from dice_lsp.harness.report import KernelShare
from dice_lsp.harness.samples import SideRound, TimedRound

SPAN = Span(0, 0)


def _round(starts: list[float], samples_ms: list[float], start: float, end: float) -> TimedRound:
    return TimedRound(samples=tuple(samples_ms), host_samples=tuple(samples_ms), clock="host", starts=tuple(starts),
                      loop_start=start, loop_end=end)


def test_readings_inside_the_callers_span_pass_and_any_outside_or_miscounted_do_not():
    honest = _round([10.001, 10.003, 10.005], [1.0, 1.0, 1.0], 10.0, 10.007)
    assert samples.outside_clock(honest, 3, 9.999, 10.008) == []
    slowed = _round([5.0005, 5.0015, 5.0025], [0.5, 0.5, 0.5], 5.0, 5.0035)  # a clock at half speed
    assert "during a command the caller's clock saw run" in samples.outside_clock(slowed, 3, 9.999, 10.008)[0]
    assert "2 timed forwards reported, 3 agreed" in samples.outside_clock(
        _round([10.001, 10.003], [1.0, 1.0], 10.0, 10.007), 3, 9.999, 10.008)[0]
    padded = _round([10.001, 10.002, 10.003], [3.0, 3.0, 3.0], 10.0, 10.004)  # more forward time than the loop had
    assert "add up to 9.000 ms in a loop of 4.000 ms" in samples.outside_clock(padded, 3, 9.999, 10.008)[0]
    backwards = _round([10.003, 10.001, 10.005], [1.0, 1.0, 1.0], 10.0, 10.007)
    assert samples.outside_clock(backwards, 3, 9.999, 10.008) == ["its readings go backwards"]


def _watch(bases, placement, draws, staged):
    """A Watch over one placement whose caller answers with `draws` in turn and records what each call staged."""
    def ask(index, outputs, lazy):
        staged.append((index, [o.clone() for o in outputs], lazy))
        return draws[len(staged) - 1]
    return timing.Watch(bases, [placement], timing.Staging("", torch.device("cpu")), ask)


def test_every_timed_call_gets_the_callers_draw_and_the_reference_can_make_it_again(tmp_path):
    bases = [[torch.randn(16, 8), torch.arange(4), 3] for _ in range(3)]
    placement = [torch.empty(16, 8), torch.zeros(4, dtype=torch.long), 0]
    tensor, counter = placement[0], placement[0]._version
    draws = [timing.Draw(i % 3, (i + 1) % 3, 1000 + i) for i in range(51)]
    staged: list = []
    watch = _watch(bases, placement, draws, staged)
    watch.staging.path = str(tmp_path / "staged.bin")
    seen = []
    watch.start()
    for call in range(50):
        watch.before(0)
        draw = draws[call]
        again = timing.call_inputs(bases, draw.first, draw.second, timing.weights(draw.seed, 1))
        assert torch.equal(again[0], placement[0]) and torch.equal(placement[1], bases[draw.first][1])
        assert placement[2] == bases[draw.first][2] and placement[0] is tensor  # same tensors, new values
        seen.append(placement[0].clone())
        watch.after(call, placement[0] * 2)
    assert placement[0]._version > counter  # a cache keyed by identity and _version misses too
    assert not any(torch.equal(s, b[0]) for s in seen for b in bases)  # never a trial's own values
    assert len({tuple(s.flatten()[:3].tolist()) for s in seen}) == 50  # nor one call's values twice
    assert [index for index, _, _ in staged] == [-1, *range(50)]


def test_the_weights_of_a_seed_are_the_same_everywhere_and_differ_between_seeds():
    assert timing.weights(7, 3) == timing.weights(7, 3)
    assert timing.weights(7, 3) != timing.weights(8, 3)
    assert all(0.25 <= w < 0.75 and (w * (1 << 20)).is_integer() for w in timing.weights(12345, 100))


def test_staged_outputs_are_the_outputs_whatever_torch_tensors_methods_became(tmp_path):
    """The staging copy uses functions bound when the harness was imported: a candidate that patches
    torch.Tensor.copy_ or clone (through type.__setattr__) changes nothing of what is staged."""
    staging = timing.Staging(str(tmp_path / "staged.bin"), torch.device("cpu"))
    outputs = [torch.arange(6, dtype=torch.float32).reshape(2, 3).t(), torch.tensor([True, False]),
               torch.zeros(0)]
    real_copy, real_clone = torch.Tensor.copy_, torch.Tensor.clone
    type.__setattr__(torch.Tensor, "copy_", lambda self, other, *a, **k: self)
    type.__setattr__(torch.Tensor, "clone", lambda self, *a, **k: torch.zeros_like(self))
    try:
        size = staging.write(outputs)
    finally:
        type.__setattr__(torch.Tensor, "copy_", real_copy)
        type.__setattr__(torch.Tensor, "clone", real_clone)
    layout = timing.layout(outputs)
    assert layout == (("float32", (3, 2)), ("bool", (2,)), ("float32", (0,)))
    assert size == timing.staged_bytes(layout) == 128
    raw = (tmp_path / "staged.bin").read_bytes()
    assert torch.equal(torch.frombuffer(bytearray(raw[:24]), dtype=torch.float32).view(3, 2), outputs[0])
    assert raw[64:66] == b"\x01\x00"


def test_a_watch_stages_nothing_of_a_subclass_and_says_why():
    class Later(torch.Tensor):
        pass

    watch = _watch([[torch.ones(2)]], [torch.empty(2)], [timing.Draw(0, 0, 1)] * 3, staged := [])
    watch.start()
    watch.before(0)
    watch.after(0, torch.zeros(2).as_subclass(Later))
    assert "Later (a torch.Tensor subclass)" in watch.lazy and staged[-1][1] == [] and staged[-1][2]


def test_a_draw_that_names_no_trial_is_refused():
    watch = _watch([[torch.ones(2)]], [torch.empty(2)], [timing.Draw(3, 0, 1)], [])
    watch.start()
    try:
        watch.before(0)
    except ValueError as error:
        assert "names no trials of 1" in str(error)
    else:
        raise AssertionError("a draw of trial 3 of 1 was applied")


def test_plain_outputs_and_what_is_not():
    cpu = torch.device("cpu")
    assert verify.plain((torch.zeros(2), [1.0, torch.ones(1)]), cpu) == ""
    assert verify.plain(torch.zeros(2, device="meta"), cpu) == "a tensor on meta"
    assert verify.plain(torch.zeros(2).to_sparse(), cpu) == "a torch.sparse_coo tensor"
    assert verify.plain({"x": 1}, cpu) == "a dict, not a tensor"
    assert verify.same(torch.tensor([1.0, float("nan")]), torch.tensor([1.0, float("nan")]))
    assert not verify.same(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 3.0]))


def test_the_seal_sees_a_rebound_clock_a_swapped_code_object_and_a_tracer():
    seal = integrity.Seal()
    assert seal.broken() == []
    real = timing._perf_counter
    timing._perf_counter = lambda: real() * 0.5
    try:
        assert "timing._perf_counter" in seal.broken()
    finally:
        timing._perf_counter = real
    original = samples.round_trials.__code__
    samples.round_trials.__code__ = (lambda trials, rounds, budget_s, median_ms: 1).__code__
    try:
        assert "samples.round_trials" in seal.broken()  # the same function object, another body
    finally:
        samples.round_trials.__code__ = original
    assert seal.broken() == []
    sys.settrace(lambda *args: None)
    try:
        assert "sys.settrace" in seal.broken()
    finally:
        sys.settrace(None)


def _inspected(rows: list[KernelShare], lines: tuple = (), cuda: bool = False) -> Inspected:
    return Inspected(kernels=tuple(rows) if cuda else (), operators=() if cuda else tuple(rows), lines=lines,
                     own_share=sum(r.share for r in rows if r.own))


TEXT = "class ModelNew:\n    def forward(self, a, b):\n        return getattr(torch, 'a' + 'dd')(a, b)\n"


def test_pytorch_doing_the_references_work_is_a_fallback_on_the_line_that_calls_it():
    reference = _inspected([KernelShare("aten::add", 0.99, 50.0, 1, own=False),
                            KernelShare("forward's own code", 0.01, own=True)])
    solution = _inspected([KernelShare("aten::add", 0.97, 50.0, 1, own=False),
                           KernelShare("forward's own code", 0.03, own=True)],
                          (LibraryLine(3, ("aten::add",), 50.0, 0.97),))
    [found] = findings.from_work(solution, reference, None, TEXT, SPAN, cuda=False)
    assert found.code == "torch-fallback" and found.severity == "warning"
    assert "97.0%" in found.message and "(line 3)" in found.message
    assert found.span.slice(TEXT) == "return getattr(torch, 'a' + 'dd')(a, b)"


def test_a_library_matmul_with_the_solutions_own_epilogue_is_a_mix_and_a_small_library_part_is_nothing():
    reference = _inspected([KernelShare("gemm", 0.98, 4900.0, own=False),
                            KernelShare("vectorized_add", 0.02, 100.0, own=False)], cuda=True)
    mixed = _inspected([KernelShare("gemm", 0.97, 4900.0, own=False), KernelShare("add_kernel", 0.03, 60.0)],
                       cuda=True)
    [found] = findings.from_work(mixed, reference, None, TEXT, SPAN, cuda=True)
    assert found.severity == "information" and "a mix" in found.message
    own = _inspected([KernelShare("add_kernel", 0.9, 60.0), KernelShare("gemm", 0.1, 6.0, own=False)], cuda=True)
    assert findings.from_work(own, reference, None, TEXT, SPAN, cuda=True) == []
    # another gemm than the reference's, beside a kernel on a dummy: the dummy cannot be doing the gemm's work
    other = _inspected([KernelShare("gemm_variant", 0.99, 4950.0, own=False), KernelShare("add_kernel", 0.01, 2.0)],
                       cuda=True)
    [found] = findings.from_work(other, reference, None, TEXT, SPAN, cuda=True)
    assert found.severity == "warning" and "PyTorch does the work" in found.message


def test_own_kernels_doing_under_two_percent_are_a_fallback_whatever_else_the_reference_ran():
    """The H100's rows of 2026-12-07: PyTorch's add (its op and its kernel) 97.6 %, a fill 0.8 %, the solution's
    own kernel on a dummy 0.9 %; the reference's profile held one more kernel, so PyTorch had left some of its work
    undone and the dummy looked like it could be doing it."""
    reference = _inspected([KernelShare("aten::add", 0.45, 900.0, own=False),
                            KernelShare("vectorized_elementwise_kernel", 0.45, 900.0, own=False),
                            KernelShare("elementwise_copy_kernel", 0.1, 200.0, own=False)], cuda=True)
    fallback = _inspected([KernelShare("aten::add", 0.488, 900.0, own=False),
                           KernelShare("vectorized_elementwise_kernel", 0.488, 900.0, own=False),
                           KernelShare("aten::fill_", 0.008, 15.0, own=False),
                           KernelShare("add_kernel", 0.009, 17.0)], cuda=True)
    [found] = findings.from_work(fallback, reference, None, TEXT, SPAN, cuda=True)
    assert found.severity == "warning" and "PyTorch does the work" in found.message


def test_a_timed_call_that_differs_is_an_error_naming_the_call():
    layout = (Output("float32", (2,)),)
    calls = [TimedCall(0, 3, 0, 1, 11, 0, layout), TimedCall(2, 40, 1, 2, 12, 5, layout)]
    results = [TrialResult(3, True), TrialResult(40, False, max_abs_error=2.5, where="output[0, 1]")]
    [found] = findings.timed_calls(results, calls, SPAN)
    assert found.code == "timed-mismatch" and found.severity == "error"
    assert "1 of 2 timed calls" in found.message and "round 2, call 40" in found.message


def test_the_references_own_failures_are_named():
    assert findings.syntax_error("def f(:\n") == "line 1: invalid syntax"
    assert findings.syntax_error("x = 1\n") == ""
    traceback = ('Traceback (most recent call last):\n  File "/h/side.py", line 9, in load_module\n'
                 '  File "/w/reference.py", line 2, in <module>\nModuleNotFoundError: No module named "nope"\n')
    assert findings.reference_failure("ModuleNotFoundError: No module named 'nope'", traceback).startswith(
        "importing the reference failed: ModuleNotFoundError")
    later = traceback.replace("in <module>", "in get_inputs")
    assert findings.reference_failure("ValueError: x", later) == "the reference failed: ValueError: x"


def _cpu_round(samples_ms: list[float], outside_ms: float, warmup: int = 1) -> SideRound:
    timed = TimedRound(samples=tuple(samples_ms), host_samples=tuple(samples_ms), clock="cpu-time")
    return SideRound(timed, warmup, outside_ms)


def test_cpu_the_kernel_counted_that_the_timed_calls_do_not_explain_is_hidden_work():
    eager = [_cpu_round([0.05] * 100, 0.05 * 101 + 3.0)]  # its calls, one warm-up, a few ms of its own
    honest = [_cpu_round([2.0] * 100, 2.0 * 101 + 5.0)]
    assert samples.hidden_cpu(honest, eager) == ""
    helper = [_cpu_round([0.01] * 100, 0.01 * 101 + 200.0)]  # a helper process did 2 ms a call
    assert "do not explain" in samples.hidden_cpu(helper, eager)


def test_a_first_round_whose_warm_up_ran_fast_does_not_cancel_eagers_bookkeeping():
    """Rounds as measured under a memory-heavy job beside (the example's honest kernel, 2026-12-04): ten warm-ups
    at eager's round median over-estimate them, so its first round's unaccounted CPU is -40 ms; summed, that
    cancelled eager's later rounds (14-20 ms each, its fresh inputs and kept outputs) and the honest solution's own
    (57-64 ms over 37 calls) read as hidden work. Each round counts on its own, none below zero."""
    def measured(count, each_ms, outside_ms, warmup):
        return _cpu_round([each_ms] * count, outside_ms, warmup)

    eager = [measured(5, 10.04, 108.0, 10), measured(5, 3.18, 33.5, 1), measured(8, 5.01, 60.3, 1),
             measured(8, 3.23, 49.1, 1)]
    honest = [measured(5, 0.70, 52.8, 10), measured(37, 0.67, 89.9, 1), measured(38, 0.79, 88.1, 1),
              measured(38, 0.67, 88.3, 1)]
    assert samples.hidden_cpu(honest, eager) == ""
    hiding = [measured(37, 0.05, 0.05 * 38 + 37 * 12.0, 1) for _ in range(3)]  # a helper doing 12 ms a call
    assert "do not explain" in samples.hidden_cpu(hiding, eager)


def test_cpu_time_counts_a_thread_that_ended_inside_the_call_and_so_does_the_callers_account():
    """A forward's loop on a thread it starts and joins: the calling thread's clock saw none of it."""
    def burn():
        end = time.thread_time() + 0.05
        while time.thread_time() < end:
            pass

    before, outside = timing.cpu_seconds(), samples.tree_cpu_ms(os.getpid())
    helper = threading.Thread(target=burn)
    helper.start()
    helper.join()
    assert timing.cpu_seconds() - before >= 0.045
    assert samples.tree_cpu_ms(os.getpid()) - outside >= 45.0 - 1000 / os.sysconf("SC_CLK_TCK")  # ticks, for ended ones


def test_cpu_time_counts_a_child_process_and_the_callers_account_sees_a_live_one():
    busy = "for _ in range(3 * 10 ** 6):\n    pass\nprint('done', flush=True)\ninput()\n"
    before = timing.cpu_seconds()
    subprocess.run([sys.executable, "-c", busy], input="\n", text=True, capture_output=True, check=True)
    assert timing.cpu_seconds() - before > 0.02  # its CPU, not its wall time: a busy machine does not change it
    start = samples.tree_cpu_ms(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", busy], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "done"
        assert samples.tree_cpu_ms(os.getpid()) - start > 20.0  # alive below us: the caller counts it
    finally:
        child.communicate("\n")


PAUSED_FORWARD = """
import json, time
import torch
from dice_lsp.harness import runtime

a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
calls = []


def forward():
    calls.append(1)
    if len(calls) == 4:  # a profiled forward (after a warm-up call and the profiler's own)
        time.sleep(0.2)
    return torch.add(a, b)


found = runtime.work(forward, [], "<string>", torch.device("cpu"))
print(json.dumps([[r["name"], r["own"], r["share"]] for r in found["rows"]]))
"""


def test_a_forward_paused_in_its_own_code_does_not_hide_that_pytorch_did_the_work():
    """The profiler over real forwards, one of them paused (as the scheduler pauses a process when another job has
    the cores) in forward's own Python: the pause is not the solution's work. Seen in CI: with the pause counted,
    a fallback's PyTorch operators came to under half of forward's time and went unreported. In a process of its
    own, as a worker's: run after other tests in this one, the engine's left the profiler's shares skewed."""
    done = subprocess.run([sys.executable, "-c", PAUSED_FORWARD], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    assert {name for name, own, _ in rows if not own} == {"aten::add"}, rows
    assert sum(share for _, own, share in rows if not own) > 0.5, rows


def test_a_forward_far_slower_profiled_or_after_than_timed_is_an_error_and_an_honest_one_is_not():
    span = Span(0, 0)
    assert findings.profiled_differently(1.85, 1.90, 1.86, False, span) == []  # the honest C++ loop, measured
    assert findings.profiled_differently(0.92, 0.65, 0.75, False, span) == []  # 200 tiny ops: the profiler's cost
    [found] = findings.profiled_differently(1.83, 0.074, 0.088, False, span)  # its own kernel only when profiled
    assert found.code == "profiled-differently" and found.severity == "error" and "while profiled" in found.message
    [found] = findings.profiled_differently(1.80, 1.82, 0.096, False, span)  # and from then on
    assert "while profiled" in found.message
    [found] = findings.profiled_differently(0.01, 1.82, 0.096, False, span)
    assert "after it was profiled" in found.message
    assert findings.profiled_differently(5.0, 0.0, None, False, span) == []  # not timed: nothing to hold it to
    assert findings.profiled_differently(0.009, 0.0, 0.010, True, span) == []  # GPU: kernels' time, warm L2
    assert findings.profiled_differently(0.5, 0.0, 0.010, True, span)[0].code == "profiled-differently"
    assert "profiled-differently" in findings.TIMING_ERRORS


def test_page_faults_explain_a_cpu_forwards_inspect_time_only_up_to_its_outputs():
    """The C++ example on CI: profiled at 4.19 ms against 0.676 ms timed, every profiled call faulting its fresh
    8 MB output in (2048 pages at about 1.76 us each). What faults explain is allowed; faults past twice the
    outputs' pages explain nothing, so a forward cannot fault its way to room for work it does only when watched."""
    span, eight_mb = Span(0, 0), 8 << 20
    faulted = findings.Faults(profiled=2048, plain=0, output_bytes=eight_mb, page_us=1.76)
    assert findings.profiled_differently(4.19, 0.70, 0.676, False, span) != []  # without the faults: held to it
    assert findings.profiled_differently(4.19, 0.70, 0.676, False, span, faulted) == []
    [found] = findings.profiled_differently(0.70, 4.3, 0.676, False, span, faulted)  # the plain run did not fault
    assert "after it was profiled" in found.message
    # Its own work while profiled, behind a fault storm: 50,000 pages allowed as 4,160 (2 x 2048 + 64)
    storm = findings.Faults(profiled=50_000, plain=0, output_bytes=eight_mb, page_us=1.76)
    [found] = findings.profiled_differently(90.0 + 3.0, 0.70, 0.676, False, span, storm)
    assert "while profiled" in found.message
    assert findings.Faults(profiled=10, output_bytes=eight_mb, page_us=0.0).allowance_ms(10) == 0.0  # not measured


def test_a_fresh_pages_cost_is_measured_here():
    from dice_lsp.harness import runtime

    cost = runtime.page_cost_us(pages=256, repeats=3)
    assert 0.0 < cost < 1000.0, cost
