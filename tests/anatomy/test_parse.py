"""The table of realistic kernel files: expected split, kernels, positions and findings."""

from __future__ import annotations

from pathlib import Path

import pytest

from dice_lsp.anatomy import LineIndex, parse

FILES = Path(__file__).parent / "files"


def read(name: str) -> str:
    return (FILES / name).read_text(encoding="utf-8")


def line_of(text: str, offset: int) -> int:
    return LineIndex(text).line_of(offset) + 1


def codes(anatomy, severity=None) -> set[str]:
    return {f.code for f in anatomy.findings if severity is None or f.severity == severity}


# name -> (kernels, warning codes that must be found, for honest files: no warnings at all)
TABLE = {
    "honest_add_with_model.py": (["elementwise_add_kernel"], set()),
    "honest_matmul_odd_strings.py": (["tiled_matmul_kernel", "scale_kernel"], set()),
    "honest_conv_fused_epilogue.py": (["bias_relu_kernel"], set()),
    "deceptive_one_shot_copy.py": (["elementwise_add_kernel"], {"binding-not-called", "torch-fallback"}),
    "deceptive_never_bound.py": (["softmax_kernel"], {"kernel-not-bound", "torch-fallback"}),
    "deceptive_bound_not_called.py": (["relu_kernel"], {"binding-not-called", "torch-fallback"}),
    "deceptive_fallbacks.py": (["gelu_kernel"], {"thread", "side-stream", "exception-fallback", "timer-patch",
                                                 "reference-reuse"}),
}


@pytest.mark.parametrize("name", sorted(TABLE))
def test_kernels_and_warnings(name):
    kernels, expected = TABLE[name]
    anatomy = parse(read(name))
    assert [k.name for k in anatomy.kernels] == kernels
    assert codes(anatomy, "warning") == expected
    assert anatomy.notes == ()


@pytest.mark.parametrize("name", sorted(TABLE))
def test_split_is_exact_and_core_is_the_cuda_assignment(name):
    text = read(name)
    anatomy = parse(text)
    assert anatomy.splits
    for split in anatomy.splits:
        prefix, core, suffix = (split.prefix.slice(text), split.core.slice(text), split.suffix.slice(text))
        assert prefix + core + suffix == text
        assert core.startswith(f"{split.source.variable} =")
        assert "__global__" in core
        assert "load_inline" in suffix and "class ModelNew" in suffix


def test_names_map_back_to_the_file_through_odd_strings():
    text = read("honest_matmul_odd_strings.py")
    anatomy = parse(text)
    functions = {f.name: f for s in anatomy.sources for f in s.functions}
    assert {n: f.kind for n, f in functions.items()} == {
        "fma_acc": "device", "tiled_matmul_kernel": "global", "tiled_matmul_cuda": "host",
        "scale_kernel": "global", "scale_inplace_cuda": "host"}
    for name, function in functions.items():
        assert function.name_span.slice(text) == name
    # The template's `template <int T>` belongs to the kernel's range.
    assert functions["tiled_matmul_kernel"].span.slice(text).startswith("template <int T>")
    # Two CUDA sources, two cores; the second is built from escaped, implicitly concatenated literals.
    assert [s.source.variable for s in anatomy.splits] == ["tiled_matmul_source", "scale_source"]
    scale = anatomy.splits[1].source
    assert scale.value.startswith("__global__ void scale_kernel(float* x, float s, int n) {\n")
    assert "\t// escaped tab" in scale.value


def test_compiler_line_inside_cuda_string_maps_to_python_line_after_non_ascii_text():
    text = read("honest_matmul_odd_strings.py")
    anatomy = parse(text)
    source = anatomy.splits[0].source
    # HELPERS (a raw string) + the kernel literal: find `__syncthreads` by the value's own line numbering.
    value_lines = source.value.split("\n")
    row = next(i for i, line in enumerate(value_lines) if "__syncthreads" in line) + 1
    column = value_lines[row - 1].index("__syncthreads") + 1
    offset = source.text_offset(source.value_offset_at(row, column))
    assert text[offset:offset + len("__syncthreads")] == "__syncthreads"
    index = LineIndex(text)
    line, character = index.position(offset, "utf-16")
    assert index.line_text(line).strip().startswith("__syncthreads")
    # The line's column in UTF-16 equals the code-point column here (ASCII line), after a line full of emoji.
    assert character == index.line_text(line).index("__syncthreads")
    # Escaped, concatenated literal: the value's line 3 is the third physical literal's text.
    scale = anatomy.splits[1].source
    offset = scale.text_offset(scale.value_offset_at(3, 5))
    assert text[offset:offset + 2] == "if"


def test_reference_and_solution_roles():
    both = parse(read("honest_add_with_model.py"))
    assert both.is_reference and both.is_solution
    assert both.get_inputs is not None and both.get_init_inputs is not None
    assert both.model_new.bindings == {"elementwise_add": "elementwise_add"}
    assert both.model_new.forward_params == ("a", "b")
    solution_only = parse(read("honest_add.py"))
    assert not solution_only.is_reference and solution_only.is_solution


def test_one_shot_copy_is_a_warning_once_the_reference_is_known():
    text = read("deceptive_one_shot_copy.py")
    alone = parse(text)
    assert alone.reference_link == "problems/level1/1_Square_matrix_multiplication_.py"
    assert codes(alone, "information") >= {"one-shot-copy"}
    reference = read("honest_matmul_odd_strings.py")  # a matmul problem (its Model), not an add
    against = parse(text, reference)
    assert "one-shot-copy" in codes(against, "warning")
    # For an add problem the same kernel is honest.
    assert "one-shot-copy" not in codes(parse(read("honest_add_with_model.py")))


def test_findings_point_at_the_offending_code():
    text = read("deceptive_fallbacks.py")
    anatomy = parse(text)
    by_code = {}
    for finding in anatomy.findings:
        by_code.setdefault(finding.code, []).append(finding.span.slice(text))
    assert "cudaStreamCreate" in by_code["side-stream"]
    assert any(s.startswith("time.perf_counter =") for s in by_code["timer-patch"])
    assert "super().forward(x)" in by_code["reference-reuse"]
    assert "ModelNew" in by_code["reference-reuse"]
    assert len(by_code["exception-fallback"]) == 2  # around the build and inside forward


def test_kernel_compiled_but_not_launched_or_not_bound():
    text = read("honest_add_with_model.py")
    unlaunched = text.replace(
        "elementwise_add_kernel<<<num_blocks, block_size>>>(a.data_ptr<float>(), b.data_ptr<float>(), "
        "out.data_ptr<float>(), size);", "")
    anatomy = parse(unlaunched)
    [finding] = [f for f in anatomy.findings if f.code == "kernel-not-bound"]
    assert finding.span.slice(unlaunched) == "elementwise_add_kernel"
    unbound = text.replace('functions=["elementwise_add_cuda"],', "")
    assert "kernel-not-bound" in codes(parse(unbound), "warning")


def test_torch_ops_doing_the_kernels_job_are_warned_others_informed():
    conv = parse(read("honest_conv_fused_epilogue.py"))
    [info] = [f for f in conv.findings if f.code == "torch-fallback"]
    assert info.severity == "information" and "Conv2d" in info.message
    text = read("honest_matmul_odd_strings.py").replace(
        "C = self.ext.tiled_matmul_cuda(A.contiguous(), B.contiguous())", "C = A @ B")
    matmul = parse(text)
    warnings = [f for f in matmul.findings if f.code == "torch-fallback"]
    assert [w.severity for w in warnings] == ["warning"]
    assert warnings[0].span.slice(text) == "A @ B"
