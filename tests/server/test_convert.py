"""Reports placed on lines: the conversion the server applies to every harness Report, including GPU-only fields."""

from __future__ import annotations

from pathlib import Path

from lsprotocol import types

from dice_lsp import convert
from dice_lsp.anatomy import Finding, LineIndex, Span, parse
from dice_lsp.harness.report import KernelShare, Report, Timing, Trial

HARNESS_FILES = Path(__file__).parent.parent / "harness" / "files"


def test_gpu_report_lands_on_model_new_and_kernel_lines():
    text = (HARNESS_FILES / "cuda_solution.py").read_text()
    anatomy = parse(text)
    unused = anatomy.function("unused_kernel").name_span
    report = Report(
        status="correct", trials=tuple(Trial(seed=i, passed=True) for i in range(6)),
        kernels=(KernelShare("add_kernel", 0.8, 12.5, 100), KernelShare("vectorized_elementwise", 0.2, 3.1, 100,
                                                                        own=False)),
        findings=(Finding("kernel-not-launched", "unused_kernel never launched", unused),),
        timings={"solution": Timing(0.012, 0.001, 0.011, 0.02, 100)}, speedup_eager=1.8, speedup_compile=1.1,
        device="NVIDIA H200")
    diagnostics = convert.report_diagnostics(anatomy, report, "utf-16")
    lines = text.splitlines()
    by_code = {d.code: d for d in diagnostics}
    headline = by_code["correct"]
    assert lines[headline.range.start.line].startswith("class ModelNew")
    assert headline.severity == types.DiagnosticSeverity.Information
    assert headline.message.startswith("correct: 1.80x vs eager, 1.10x vs torch.compile; 6 correctness trials, 100 "
                                       "timed trials")
    share = by_code["kernel-time"]
    assert "add_kernel" in lines[share.range.start.line] and share.message.startswith("add_kernel: 80% of forward")
    assert [d.code for d in diagnostics].count("kernel-time") == 1  # library kernels are not placed on lines
    assert "unused_kernel" in lines[by_code["kernel-not-launched"].range.start.line]
    hover = convert.kernel_hover(anatomy, report, anatomy.function("add_kernel").name_span.start + 1)
    assert "80.0% of forward GPU time, 12.5 us over 100 launches" in hover


def test_failed_reports_are_errors_with_the_worst_element():
    anatomy = parse((HARNESS_FILES / "add_solution.py").read_text())
    report = Report(status="mismatch", trials=(Trial(seed=1, passed=False, max_abs_error=2.5, where="output[3, 4]"),
                                               Trial(seed=2, passed=True)))
    [headline] = convert.report_diagnostics(anatomy, report, "utf-16")
    assert headline.severity == types.DiagnosticSeverity.Error
    assert headline.message == "wrong result on 1 of 2 trials; max abs error 2.5 at output[3, 4]"
    assert convert.result_line(Report(status="cancelled")) == ""
    # An emoji is two UTF-16 code units: the character after it starts at column 2.
    assert convert.lsp_range(LineIndex("ab\n😀x"), Span(4, 5), "utf-16") == \
        types.Range(types.Position(1, 2), types.Position(1, 3))
