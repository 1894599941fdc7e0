"""Reports placed on lines: the conversion the server applies to every harness Report, including GPU-only fields."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

from lsprotocol import types

from dice_lsp import convert
from dice_lsp.anatomy import Finding, LineIndex, Span, parse
from dice_lsp.harness import findings as run_time
from dice_lsp.harness.report import Diagnostic, KernelShare, Report, Timing, Trial

HARNESS_FILES = Path(__file__).parent.parent / "harness" / "files"
FILES = Path(__file__).parent.parent / "anatomy" / "files"


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
    share = by_code["kernel-time"]  # a hint: a result, not a problem for the problems list
    assert "add_kernel" in lines[share.range.start.line] and share.message.startswith("add_kernel: 80% of forward")
    assert share.severity == types.DiagnosticSeverity.Hint
    assert [d.code for d in diagnostics].count("kernel-time") == 1  # library kernels are not placed on lines
    assert "unused_kernel" in lines[by_code["kernel-not-launched"].range.start.line]
    hover = convert.kernel_hover(anatomy, report, anatomy.function("add_kernel").name_span.start + 1)
    assert "80.0% of forward GPU time, 12.5 us over 100 launches" in hover
    # The same results as inlay hints at the ends of their lines: the speedup on ModelNew's, the share on the kernel's
    hints = {lines[h.position.line].split("(")[0]: h for h in convert.inlay_hints(anatomy, report, "utf-16")}
    result = next(h for line, h in hints.items() if line.startswith("class ModelNew"))
    assert result.label == "correct, 1.80x vs eager" and result.position.character == len(
        lines[result.position.line]) and result.tooltip == headline.message
    [kernel] = [h for line, h in hints.items() if "add_kernel" in line]
    assert kernel.label == "80% of GPU time, 12.5 us"
    assert convert.inlay_hints(anatomy, None, "utf-16") == []  # no check of this text: no hints
    only_kernel_line = range(kernel.position.line, kernel.position.line + 1)
    assert [h.label for h in convert.inlay_hints(anatomy, report, "utf-16", only_kernel_line)] == [kernel.label]


def test_a_correct_kernel_much_slower_than_eager_is_a_warning_that_says_by_how_much():
    anatomy = parse((HARNESS_FILES / "cuda_solution.py").read_text())
    slow = Report(status="correct", speedup_eager=1 / 300, trials=(Trial(seed=1, passed=True),))
    [headline] = convert.report_diagnostics(anatomy, slow, "utf-16")
    assert headline.severity == types.DiagnosticSeverity.Warning
    assert headline.message.startswith("correct: 0.0033x vs eager, 300x slower;")
    for fine in (0.6, 1.8):
        [headline] = convert.report_diagnostics(anatomy, Report(status="correct", speedup_eager=fine), "utf-16")
        assert headline.severity == types.DiagnosticSeverity.Information


def test_each_finding_links_to_its_row_of_the_readme_findings_table():
    anatomy = parse((FILES / "deceptive_never_bound.py").read_text())
    diagnostics = convert.anatomy_diagnostics(anatomy, "utf-16")
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    linked = [d for d in diagnostics if d.code_description is not None]
    assert {d.code for d in linked} >= {"kernel-not-bound", "torch-fallback"}
    for diagnostic in linked:
        page, anchor = diagnostic.code_description.href.split("#")
        assert page == (Path(__file__).parents[2] / "README.md").as_uri()
        assert f'<a id="{anchor}"></a>`{diagnostic.code}`' in readme
    for code in convert.FINDING_CODES:  # every code the table documents has its row
        assert f'<a id="finding-{code}"></a>`{code}`' in readme


def test_every_finding_code_the_checks_make_is_documented():
    """The codes named in anatomy's table of constants and in each Finding(...) the harness makes."""
    root = Path(__file__).parents[2]
    made = set()
    for source in (root / "dice_lsp" / "anatomy" / "findings.py", root / "harness" / "findings.py",
                   root / "harness" / "verdict.py", root / "harness" / "rounds.py"):
        text = source.read_text()
        made |= set(re.findall(r'^[A-Z_]+ = "([a-z-]+)"', text, re.M))
        made |= set(re.findall(r'Finding\(\s*"([a-z-]+)"', text))
    assert made and made <= set(convert.FINDING_CODES), made - set(convert.FINDING_CODES)


def test_a_generated_edit_asks_for_confirmation_when_asked_to():
    plain = convert.replace_edit("file:///a.py", 3, "abc", Span(1, 2), "X", "utf-16")
    assert plain.change_annotations is None and type(plain.document_changes[0].edits[0]) is types.TextEdit
    confirmed = convert.replace_edit("file:///a.py", 3, "abc", Span(1, 2), "X", "utf-16", confirm="Infilling")
    [edit] = confirmed.document_changes[0].edits
    annotation = confirmed.change_annotations[edit.annotation_id]
    assert annotation.needs_confirmation is True and annotation.label == "Infilling" and edit.new_text == "X"


def test_failed_reports_are_errors_with_the_worst_element():
    anatomy = parse((HARNESS_FILES / "add_solution.py").read_text())
    report = Report(status="mismatch", trials=(Trial(seed=1, passed=False, max_abs_error=2.5, where="output[3, 4]"),
                                               Trial(seed=2, passed=True)))
    [headline] = convert.report_diagnostics(anatomy, report, "utf-16")
    assert headline.severity == types.DiagnosticSeverity.Error
    assert headline.message == "wrong result on 1 of 2 trials; max abs error 2.5 at output[3, 4]"
    # The harness's message already names the element and the seed: it is not repeated
    report = Report(status="mismatch", message="max abs error 2.23 at output[156, 332] (seed 43)",
                    trials=(Trial(seed=43, passed=False, max_abs_error=2.23, where="output[156, 332]"),))
    [headline] = convert.report_diagnostics(anatomy, report, "utf-16")
    assert headline.message == "wrong result on 1 of 1 trials: max abs error 2.23 at output[156, 332] (seed 43)"
    assert convert.result_line(Report(status="cancelled")) == ""
    # An emoji is two UTF-16 code units: the character after it starts at column 2.
    assert convert.lsp_range(LineIndex("ab\n😀x"), Span(4, 5), "utf-16") == \
        types.Range(types.Position(1, 2), types.Position(1, 3))


def test_related_locations_are_given_only_with_places_and_point_into_the_file_that_holds_them():
    text = (HARNESS_FILES / "cuda_solution.py").read_text()
    lines, anatomy, uri = text.splitlines(), parse(text), "file:///work/solution.py"
    assert all(d.related_information is None for d in convert.anatomy_diagnostics(anatomy, "utf-16"))
    [unlaunched] = [d for d in convert.anatomy_diagnostics(anatomy, "utf-16", places=convert.Places(uri))
                    if d.code == "kernel-not-bound"]
    [place] = unlaunched.related_information
    assert place.location.uri == uri and place.message == "`add_cuda` is bound but does not launch it"
    assert lines[place.location.range.start.line].startswith("torch::Tensor add_cuda(")
    # Model in the linked problem file: its places are in that file, and dropped where that file has no uri
    problem = ("import torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x, y):\n"
               "        return x + y\n")
    solution = parse((FILES / "deceptive_bound_not_called.py").read_text(), problem)
    places = convert.Places(uri, "file:///work/problem.py", problem)
    [mismatch] = [d for d in convert.anatomy_diagnostics(solution, "utf-16", places=places)
                  if d.code == "signature-mismatch" and "forward" in d.message]
    [place] = mismatch.related_information
    assert place.location.uri == "file:///work/problem.py" and place.location.range.start.line == 3
    unsaved = [d for d in convert.anatomy_diagnostics(solution, "utf-16", places=convert.Places(uri))
               if d.code == "signature-mismatch"]
    assert unsaved and all(d.related_information is None for d in unsaved)


def test_a_compile_error_a_wrong_result_and_run_time_findings_point_at_the_python_that_runs_the_kernel():
    text = (HARNESS_FILES / "cuda_solution.py").read_text()
    lines, anatomy, places = text.splitlines(), parse(text), convert.Places("file:///s.py")

    def line_of(place: types.DiagnosticRelatedInformation) -> str:
        return lines[place.location.range.start.line].strip()

    inside = text.index("out[i] = a[i] + b[i];")
    error = Diagnostic("error", "identifier \"c\" is undefined", 0, 0, span=Span(inside, inside + 6), file="cuda.cu")
    outside = Diagnostic("error", "ld returned 1 exit status", 0, 0)
    compiled = convert.report_diagnostics(anatomy, Report(status="compile-error", diagnostics=(error, outside)),
                                          "utf-16", places)
    [placed, unplaced] = [d for d in compiled if d.code == "compile"]
    [place] = placed.related_information
    assert line_of(place) == "add_extension = load_inline(" and place.message == \
        "`cuda_source` is compiled by this load_inline"
    assert unplaced.related_information is None  # no place in the file: no second place either
    wrong = Report(status="mismatch", trials=(Trial(seed=1, passed=False, max_abs_error=1.0, where="output[0]"),))
    [headline] = convert.report_diagnostics(anatomy, wrong, "utf-16", places)
    assert [(line_of(p), p.message) for p in headline.related_information] == [
        ("return self.add.add_cuda(a, b)", "forward runs the compiled `add_cuda` here")]
    # Kernels the profiler never saw launched: each points at its launch in the host code, where it has one
    report = Report(status="correct", findings=tuple(run_time.from_kernels((), anatomy)))
    unlaunched = {lines[d.range.start.line].split("(")[0].split()[-1]: d
                  for d in convert.report_diagnostics(anatomy, report, "utf-16", places)
                  if d.code == "kernel-not-launched"}
    add, unused = unlaunched["add_kernel"], unlaunched["unused_kernel"]
    assert [(line_of(p), p.message) for p in add.related_information] == [
        (next(line.strip() for line in lines if line.strip().startswith("add_kernel<<<")),
         "launched here, but this launch did not run during forward")]
    assert unused.related_information is None
    # PyTorch did the work: the fallback points at the file's own kernels it did it in place of
    row = SimpleNamespace
    solution = row(kernels=[row(name="vectorized_elementwise", own=False, share=0.97, time_us=97.0),
                            row(name="add_kernel", own=True, share=0.03, time_us=3.0)], lines=[])
    reference = row(kernels=[row(name="vectorized_elementwise", own=False, share=1.0, time_us=95.0)])
    [fallback] = run_time.from_work(solution, reference, anatomy, text, anatomy.model_new.forward, cuda=True)
    [diagnostic] = [d for d in convert.report_diagnostics(anatomy, Report(status="correct", findings=(fallback,)),
                                                          "utf-16", places) if d.code == "torch-fallback"]
    assert [p.message for p in diagnostic.related_information] == [
        "kernel `add_kernel`: PyTorch's kernels did the work in its place",
        "kernel `unused_kernel`: PyTorch's kernels did the work in its place"]


def test_a_pulled_report_is_named_by_its_content_and_unchanged_when_the_client_holds_it():
    anatomy = parse((FILES / "deceptive_never_bound.py").read_text())
    diagnostics = convert.anatomy_diagnostics(anatomy, "utf-16")
    full = convert.diagnostic_report(diagnostics, None)
    assert full.kind == "full" and full.items == diagnostics and full.result_id
    assert convert.diagnostic_report(convert.anatomy_diagnostics(anatomy, "utf-16"), None).result_id == full.result_id
    same = convert.diagnostic_report(diagnostics, full.result_id)
    assert same.kind == "unchanged" and same.result_id == full.result_id
    moved = convert.diagnostic_report(diagnostics[1:], full.result_id)
    assert moved.kind == "full" and moved.result_id != full.result_id and moved.items == diagnostics[1:]
