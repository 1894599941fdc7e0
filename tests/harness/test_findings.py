"""Run-time finding rules over worker replies: caching, tiny outputs, precision, threads, unlaunched kernels."""

from dice_lsp.anatomy import parse
from dice_lsp.anatomy.types import Span
from dice_lsp.harness.findings import from_kernels, from_run, from_trials
from dice_lsp.harness.messages import Ran, TrialResult
from dice_lsp.harness.options import Options
from dice_lsp.harness.report import KernelShare


SPAN = Span(0, 1)


def trial(passed=True, rel=0.0, changed=False, notes=()):
    return TrialResult(seed=1, passed=passed, relative_l2=rel, changed_inputs=changed, dtype_notes=tuple(notes))


def codes(found):
    return sorted(f.code for f in found)


def test_output_cached_when_only_changed_inputs_fail(files):
    assert codes(from_trials([trial(), trial(), trial(False, 1.0, True)], ["torch.float32"], Options(), SPAN)) == [
        "output-cached"]
    assert codes(from_trials([trial(False, 1.0), trial(False, 1.0, True)], [], Options(), SPAN)) == []


def test_tiny_output_and_precision(files):
    assert codes(from_trials([trial(rel=1.0)], ["torch.float32"], Options(), SPAN)) == ["tiny-output"]
    assert codes(from_trials([trial(rel=3e-4)], ["torch.float32"], Options(), SPAN)) == ["precision"]
    assert codes(from_trials([trial(rel=3e-4)], ["torch.float16"], Options(), SPAN)) == []
    assert codes(from_trials([trial(notes=["output is torch.float16"])], [], Options(), SPAN)) == ["precision"]


def test_run_findings(files):
    ran = Ran(device="cpu", changed_tensors=2, threads=("Thread-1",), precision_before={"tf32": False},
              precision_after={"tf32": True}, outputs="file", inputs="file")
    assert codes(from_run(ran, Options(), SPAN)) == ["precision", "thread"]


def test_kernel_not_launched(files):
    anatomy = parse(files.text("cuda_solution.py"))
    seen = [KernelShare("add_kernel", 0.9), KernelShare("void at::native::foo()", 0.1, own=False)]
    [finding] = from_kernels(seen, anatomy)
    assert finding.code == "kernel-not-launched" and "unused_kernel" in finding.message
    assert finding.severity == "warning"
    assert {f.severity for f in from_kernels([], anatomy)} == {"error"}
