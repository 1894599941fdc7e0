"""The Report survives JSON (it crosses processes and is stored by eval) and summarises itself in one line."""

from dice_lsp.anatomy.types import Finding, Related, Span
from dice_lsp.harness.report import Diagnostic, KernelShare, Report, Stage, Timing, Trial


def full_report() -> Report:
    return Report(
        status="correct", message="", stages=(Stage("build", "ok", 1.5), Stage("verify", "ok", 0.2)),
        diagnostics=(Diagnostic("warning", "unused variable", 12, 4, Span(300, 305), "cuda.cu"),),
        trials=(Trial(43, True, 1e-6, 2e-6, "output[0, 1]", 1e-7), Trial(10042, True, changed_inputs=True)),
        findings=(Finding("precision", "tf32", Span(1, 2), "information"),
                  Finding("kernel-not-launched", "never ran", Span(3, 4), "warning",
                          related=(Related(Span(5, 9), "launched here"), Related(Span(0, 2), "Model", True)))),
        static_findings=(Finding("thread", "imports threading", Span(0, 5)),),
        kernels=(KernelShare("add_kernel", 0.9, 12.0, 1), KernelShare("elementwise", 0.1, 1.0, 1, own=False)),
        timings={"solution": Timing(0.5, 0.01, 0.49, 0.6, 100, 0.52), "eager": Timing(1.0, 0.02, 0.9, 1.1, 100)},
        speedup_eager=2.0, speedup_compile=None, tf32=False, cudnn_tf32=True, device="NVIDIA H200",
        build_cached=True, build_mode="light", log="")


def test_json_round_trip_keeps_every_field():
    report = full_report()
    assert Report.from_json(report.to_json()) == report


def test_summary_names_status_speedup_and_findings():
    line = full_report().summary()
    assert line.startswith("correct")
    assert "2.00x vs eager" in line
    assert "precision" in line and "thread" in line


def test_durations_and_errors():
    report = Report("compile-error", "x", stages=(Stage("build", "failed", 3.0),),
                    diagnostics=(Diagnostic("error", "boom", 7, 0), Diagnostic("warning", "meh", 8, 0)))
    assert report.durations == {"build": 3.0}
    assert [d.message for d in report.errors] == ["boom"]
    assert "line 8: boom" in report.summary()
