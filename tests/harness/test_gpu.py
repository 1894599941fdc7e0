"""On a GPU: kernels found by the profiler, unlaunched kernels, work escaping the timed stream, both baselines."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dice_lsp import harness

FILES = Path(__file__).parent / "files"
# Every test here checks the one CUDA fixture, some with another forward or a prelude: the same load_inline, one build
pytestmark = [pytest.mark.gpu, pytest.mark.slow, pytest.mark.prebuild(
    pairs=lambda: [((FILES / "add_reference.py").read_text(), (FILES / "cuda_solution.py").read_text())])]


@pytest.fixture(scope="module")
def gpu_options(options, prebuilt):
    return options.with_(device="auto", baseline="both", timing_trials=100, warmup_trials=10)


def test_cuda_kernel_is_verified_timed_and_profiled(files, gpu_options):
    """The numbers a user reads, within what this kernel can give: one elementwise add of two 512x512 float32
    tensors, as fast as eager's own add within a few times either way (0.62-1.01x on the H200, RESULTS.md), a few
    microseconds a forward, nearly all of its GPU time in add_kernel, on this machine's GPU."""
    report = harness.check(files.text("add_reference.py"), files.text("cuda_solution.py"), gpu_options)
    assert report.status == "correct", report.summary() + report.log
    assert report.device in {torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())}
    own = [k for k in report.kernels if k.own]
    assert [k.name for k in own] == ["add_kernel"], report.kernels
    assert 0.5 <= own[0].share <= 1.0 and 0.5 < own[0].time_us < 100 and own[0].launches == 1, own[0]  # per forward
    # (notes about the machine, not the kernel: a GPU worker left root, no memory cgroup there)
    assert [f.code for f in report.findings if f.code not in ("unsandboxed", "memory-uncapped")] == \
        ["kernel-not-launched"], (report.summary(), report.findings, report.timings)
    assert set(report.timings) == {"solution", "eager", "compile"}
    assert 0.3 < report.speedup_eager < 3.0 and 0.1 < report.speedup_compile < 10.0, report.summary()
    solution, eager = report.timings["solution"], report.timings["eager"]
    assert solution.clock == "cuda-events" and 0.0005 < solution.median_ms < 0.5, solution  # 0.5 us to 0.5 ms
    assert solution.trials >= 100 and eager.trials >= 100
    assert report.speedup_eager == pytest.approx(eager.median_ms / solution.median_ms, rel=1e-6)
    assert next(s.detail for s in report.stages if s.name == "verify").endswith("outputs by CUDA IPC")


def test_re_checks_of_a_kept_reference_make_their_inputs_on_the_gpu_and_share_outputs_by_ipc(files, gpu_options):
    """Re-checks of a kept reference: each solution worker makes the trial inputs itself, on the GPU, from their
    seeds, and hands its outputs over by CUDA IPC between the two sandboxes. A solution that writes into its inputs
    changes only its own: the next check's inputs are the same, and a wrong solution is still caught."""
    pool = harness.WorkerPool()
    pool.keep_warm(1)
    options = gpu_options.with_(baseline="eager", timing_trials=20)
    reference, solution = files.text("add_reference.py"), files.text("cuda_solution.py")
    writes = solution.replace("        return self.add.add_cuda(a, b)",
                              "        out = self.add.add_cuda(a, b)\n        a.zero_()\n        return out")
    wrong = solution.replace("return self.add.add_cuda(a, b)", "return self.add.add_cuda(a, a)")
    try:
        reports = [harness.check(reference, text, options, pool=pool) for text in (solution, writes, solution, wrong)]
    finally:
        pool.close()
    assert [r.status for r in reports] == ["correct", "correct", "correct", "mismatch"], \
        [(r.summary(), r.message, r.log[-2000:]) for r in reports]
    verify = [next(s.detail for s in r.stages if s.name == "verify") for r in reports]
    assert all(v == "inputs made by each worker (on the GPU), outputs by CUDA IPC" for v in verify), verify
    assert [t.max_abs_error for t in reports[2].trials] == [t.max_abs_error for t in reports[0].trials]


def test_work_on_a_side_stream_is_caught_by_the_host_clock(files, gpu_options):
    solution = files.text("cuda_solution.py").replace(
        "        return self.add.add_cuda(a, b)",
        "        side = torch.cuda.Stream()\n"
        "        with torch.cuda.stream(side):\n"
        "            torch.cuda._sleep(20_000_000)\n"
        "        return self.add.add_cuda(a, b)")
    report = harness.check(files.text("add_reference.py"), solution, gpu_options.with_(baseline="eager"))
    assert report.status == "correct", report.summary() + report.log
    assert "timer-mismatch" in [f.code for f in report.findings]


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="a root caller's defence")
def test_a_root_callers_gpu_check_runs_its_candidate_unprivileged(files, gpu_options):
    """With unprivileged_gpu on, a root caller's GPU workers run as nobody: the solution sees itself so, its
    outputs still reach the reference by CUDA IPC (the driver's files handed over and given to that user), its kernels
    are still profiled, and no `unsandboxed` warning says otherwise. Passing here is what turns it on by default."""
    prelude = ("import os\nif 0 in os.getresuid():\n    raise RuntimeError('runs as root')\n")
    report = harness.check(files.text("add_reference.py"), prelude + files.text("cuda_solution.py"),
                           gpu_options.with_(unprivileged_gpu=True, sandbox="require"))
    assert report.status == "correct", report.summary() + report.message + report.log
    assert "unsandboxed" not in [f.code for f in report.findings], report.findings
    assert next(s.detail for s in report.stages if s.name == "verify").endswith("outputs by CUDA IPC")
    assert [k.name for k in report.kernels if k.own] == ["add_kernel"], report.kernels
