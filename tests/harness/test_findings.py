"""Run-time finding rules over worker replies: caching, tiny outputs, precision, threads, unlaunched kernels."""

from dice_lsp.anatomy import parse
from dice_lsp.anatomy.types import Span
from dice_lsp.harness.findings import from_kernels, from_run, from_streams, from_trials
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


def test_kernels_only_on_a_stream_of_their_own_count_as_a_side_stream():
    """The profile's marker kernel runs on the stream forward was called on (the timer's); a forward whose kernels
    all run on another stream therefore counts two streams and gets the side-stream warning, as does one that
    splits its work; copies, fills and our own ranges are no kernels. (Events as the kineto profiler gives them.)"""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    from dice_lsp.harness import runtime

    def kernel(name, stream, kind=DeviceType.CUDA):
        return SimpleNamespace(name=name, device_resource_id=stream, device_type=kind)

    marker = kernel("void at::native::(anonymous namespace)::spin_kernel(long)", 7)
    honest = [marker, kernel("add_kernel(float const*, float const*, float*, int)", 7), kernel("dice::forward", 0)]
    aside = [marker, kernel("add_kernel(float const*, float const*, float*, int)", 13),
             kernel("Memcpy DtoD (Device -> Device)", 7), kernel("aten::empty_like", 0, DeviceType.CPU)]
    assert runtime._streams(honest) == 1 and from_streams(1, Span(0, 0)) == []
    assert runtime._streams(aside) == 2
    assert [f.code for f in from_streams(runtime._streams(aside), Span(0, 0))] == ["side-stream"]
