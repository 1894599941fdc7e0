"""The second places findings point at (related locations), each read from the file and checked against its text."""

from __future__ import annotations

from pathlib import Path

from dice_lsp.anatomy import parse

FILES = Path(__file__).parent / "files"
HARNESS_FILES = Path(__file__).parent.parent / "harness" / "files"
PROBLEM = ("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self, scale):\n"
           "        super().__init__()\n\n    def forward(self, x, y):\n        return x @ y * 2\n\n"
           "def get_inputs():\n    return [torch.randn(4, 4), torch.randn(4, 4)]\n")


def read(name: str) -> str:
    return (FILES / name).read_text(encoding="utf-8")


def places(anatomy, code: str, within: str | None = None) -> list[list[tuple[str, str]]]:
    """For each finding of `code`: its related places as (the text they cover, their message)."""
    return [[(r.span.slice(within if r.in_reference and within is not None else anatomy.text), r.message)
             for r in finding.related] for finding in anatomy.findings if finding.code == code]


def test_an_unlaunched_kernel_points_at_the_bound_host_function_that_does_not_launch_it():
    text = (HARNESS_FILES / "cuda_solution.py").read_text()
    assert places(parse(text), "kernel-not-bound") == [[("add_cuda", "`add_cuda` is bound but does not launch it")]]


def test_a_kernel_launched_only_by_an_unbound_host_function_points_at_that_function():
    text = (HARNESS_FILES / "cuda_solution.py").read_text().replace(
        '"""\n\ncpp_source', 'void zero_out(torch::Tensor out) {\n    unused_kernel<<<1, 32>>>(out.data_ptr<float>(), '
        '32);\n}\n"""\n\ncpp_source', 1)
    anatomy = parse(text)
    [[(covered, message)]] = places(anatomy, "kernel-not-bound")
    assert covered == "zero_out" and message == "`zero_out` launches it but is not bound"
    line = anatomy.text[:anatomy.function("zero_out").name_span.start].count("\n")
    assert text.splitlines()[line].startswith("void zero_out(")


def test_an_extension_nothing_binds_points_at_the_kernels_that_never_run():
    anatomy = parse(read("deceptive_never_bound.py"))
    assert places(anatomy, "kernel-not-bound") == [[("softmax_kernel", "kernel `softmax_kernel` never runs")]]
    unbound = read("honest_add_with_model.py").replace('functions=["elementwise_add_cuda"],', "")
    assert places(parse(unbound), "kernel-not-bound") == [
        [("elementwise_add_kernel", "kernel `elementwise_add_kernel` cannot be reached from Python")]]


def test_a_binding_forward_never_calls_and_the_pytorch_doing_its_job_point_at_the_kernel_code():
    anatomy = parse(read("deceptive_bound_not_called.py"))
    assert places(anatomy, "binding-not-called") == [[("relu_cuda", "`relu_cuda` is bound but never called")]]
    assert places(anatomy, "torch-fallback") == [
        [("relu_kernel", "kernel `relu_kernel` is compiled but forward never runs it")]]
    # A kernel runs, and forward also computes its job with PyTorch: the kernel and the binding named for the job
    text = read("honest_matmul_odd_strings.py").replace(
        "C = self.ext.tiled_matmul_cuda(A.contiguous(), B.contiguous())",
        "C = self.ext.tiled_matmul_cuda(A.contiguous(), B.contiguous()) + A @ B")
    assert places(parse(text), "torch-fallback") == [[("tiled_matmul_kernel", "`tiled_matmul_kernel` is named for "
                                                       "this job"), ("tiled_matmul_cuda", "`tiled_matmul_cuda` is "
                                                                                         "named for this job")]]
    # PyTorch beside the kernels, doing another job: information, with no second place
    conv = parse(read("honest_conv_fused_epilogue.py"))
    assert places(conv, "torch-fallback") == [[]]


def test_a_try_around_a_kernel_or_its_build_points_at_the_except_that_runs_instead():
    anatomy = parse(read("deceptive_fallbacks.py"))
    found = places(anatomy, "exception-fallback")
    assert [[(covered.splitlines()[0].strip(), message) for covered, message in finding] for finding in found] == [
        [("except Exception:", "runs instead when the build fails")],
        [("except Exception:", "runs instead when the kernel fails")]]


def test_reusing_or_mismatching_the_reference_points_at_model_in_its_own_file():
    anatomy = parse(read("deceptive_fallbacks.py"))  # Model lives in the solution's own file
    reuse = [finding.related for finding in anatomy.findings if finding.code == "reference-reuse"]
    assert [[(r.span.slice(anatomy.text).split("(")[0], r.in_reference) for r in related] for related in reuse] == [
        [("Model", False)], [("def forward", False)]]
    solution = read("deceptive_bound_not_called.py")  # Model in the linked problem: the places are in that file
    against = parse(solution, PROBLEM)
    mismatched = places(against, "signature-mismatch", within=PROBLEM)
    assert [[(covered.splitlines()[0], message) for covered, message in found] for found in mismatched] == [
        [("def __init__(self, scale):", "Model's __init__")], [("def forward(self, x, y):", "Model's forward")]]
    assert all(r.in_reference for f in against.findings if f.code == "signature-mismatch" for r in f.related)
    copy = parse(read("deceptive_one_shot_copy.py"), PROBLEM)
    assert [[(c.splitlines()[0], m) for c, m in found] for found in places(copy, "one-shot-copy", within=PROBLEM)] == [
        [("def forward(self, x, y):", "what the problem computes")]]
    # Without a reference there is no Model to point at
    assert places(parse(read("deceptive_one_shot_copy.py")), "one-shot-copy") == [[]]
