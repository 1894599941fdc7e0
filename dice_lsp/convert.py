"""The one place where dice-lsp's objects (Anatomy, Report, the session's answers) become LSP types: diagnostics,
code actions and lenses, hovers, edits, messages.

Everything here is pure: it takes text, objects and the negotiated position encoding, and returns lsprotocol values.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from lsprotocol import types

from dice_lsp.anatomy import Anatomy, LineIndex, Span

SOURCE = "dice"
_SEVERITY = {
    "error": types.DiagnosticSeverity.Error,
    "warning": types.DiagnosticSeverity.Warning,
    "information": types.DiagnosticSeverity.Information,
    "hint": types.DiagnosticSeverity.Hint,
}


def lsp_range(index: LineIndex, span: Span, encoding: str) -> types.Range:
    start = index.position(span.start, encoding)  # type: ignore[arg-type]
    end = index.position(max(span.end, span.start), encoding)  # type: ignore[arg-type]
    return types.Range(types.Position(*start), types.Position(*end))


def first_line(index: LineIndex, span: Span, encoding: str) -> types.Range:
    """A long span (a class, a try block) shown on its first line only, so it does not paint the whole block."""
    line = index.line_of(span.start)
    end = min(span.end, index.line_starts[line] + len(index.line_text(line)))
    return lsp_range(index, Span(span.start, max(end, span.start)), encoding)


def offset(text: str, position: types.Position, encoding: str) -> int:
    """The character offset in `text` of an LSP position."""
    return LineIndex(text).offset(position.line, position.character, encoding)  # type: ignore[arg-type]


def document_diagnostics(anatomy: Anatomy, reference_missing: str | None, report, encoding: str
                         ) -> list[types.Diagnostic]:
    """All of a file's diagnostics: its anatomy's, then its check's (`report`, None when it was of another text),
    leaving out a check's finding where the anatomy already put the same code on that line."""
    diagnostics = anatomy_diagnostics(anatomy, encoding, reference_missing)
    if report is not None:
        static = {(d.code, d.range.start.line) for d in diagnostics}
        for diagnostic in report_diagnostics(anatomy, report, encoding):
            if (diagnostic.code, diagnostic.range.start.line) not in static:
                diagnostics.append(diagnostic)
    return diagnostics


def anatomy_diagnostics(anatomy: Anatomy, encoding: str, reference_missing: str | None = None
                        ) -> list[types.Diagnostic]:
    """Static findings, syntax trouble and what is missing for a check, as diagnostics."""
    index = LineIndex(anatomy.text)
    out = []
    for finding in anatomy.findings:
        out.append(types.Diagnostic(
            range=first_line(index, finding.span, encoding), message=finding.message,
            severity=_SEVERITY.get(finding.severity, types.DiagnosticSeverity.Warning), code=finding.code,
            source=SOURCE,
        ))
    if anatomy.model is not None and anatomy.get_inputs is None:
        out.append(types.Diagnostic(
            range=first_line(index, anatomy.model.name_span, encoding), code="missing-get-inputs", source=SOURCE,
            severity=types.DiagnosticSeverity.Warning,
            message="`class Model` has no `get_inputs()` beside it, so it cannot be run or benchmarked",
        ))
    if anatomy.model_new is not None and reference_missing:
        out.append(types.Diagnostic(
            range=first_line(index, anatomy.model_new.name_span, encoding), code="no-reference", source=SOURCE,
            severity=types.DiagnosticSeverity.Warning, message=reference_missing,
        ))
    for source in anatomy.sources:
        for error in source.parse_errors[:3]:
            out.append(types.Diagnostic(
                range=first_line(index, error, encoding), code="cuda-syntax", source=SOURCE,
                severity=types.DiagnosticSeverity.Hint,
                message="tree-sitter could not parse this C++/CUDA; the compiler will say more on save",
            ))
    return out


def report_diagnostics(anatomy: Anatomy, report, encoding: str) -> list[types.Diagnostic]:
    """A harness Report placed on the lines it is about: compile errors, failures, run-time findings, speedups."""
    index = LineIndex(anatomy.text)
    out = []
    for diagnostic in report.diagnostics:
        if diagnostic.span is not None:
            where = lsp_range(index, diagnostic.span, encoding)
        else:
            line = max(0, min(diagnostic.line, len(index.line_starts) - 1))
            where = types.Range(types.Position(line, 0), types.Position(line, len(index.line_text(line))))
        prefix = f"{diagnostic.file}: " if diagnostic.span is None and diagnostic.file else ""
        out.append(types.Diagnostic(range=where, message=prefix + diagnostic.message, source=SOURCE,
                                    severity=_SEVERITY.get(diagnostic.severity, types.DiagnosticSeverity.Error),
                                    code="compile"))
    for finding in report.findings:  # run-time findings; the static ones come from anatomy on every change
        out.append(types.Diagnostic(
            range=first_line(index, finding.span, encoding), message=finding.message, code=finding.code,
            severity=_SEVERITY.get(finding.severity, types.DiagnosticSeverity.Warning), source=SOURCE,
        ))
    anchor = anatomy.model_new.name_span if anatomy.model_new is not None else Span(0, 0)
    headline = result_line(report)
    if headline:
        failed = report.status not in ("correct", "built-not-run")
        out.append(types.Diagnostic(
            range=first_line(index, anchor, encoding), message=headline, source=SOURCE, code=report.status,
            severity=types.DiagnosticSeverity.Error if failed else types.DiagnosticSeverity.Information,
        ))
    for share in report.kernels:
        kernel = anatomy.function(share.name)
        if kernel is None or not share.own:
            continue
        out.append(types.Diagnostic(
            range=lsp_range(index, kernel.name_span, encoding), source=SOURCE, code="kernel-time",
            severity=types.DiagnosticSeverity.Information,
            message=f"{share.name}: {share.share:.0%} of forward GPU time ({share.time_us:.1f} us, "
                    f"{share.launches} launch{'es' if share.launches != 1 else ''})",
        ))
    return out


def result_line(report) -> str:
    """The headline shown on `class ModelNew` and in the code lens."""
    status = report.status
    if status == "correct":
        parts = []
        if report.speedup_eager is not None:
            parts.append(f"{report.speedup_eager:.2f}x vs eager")
        if report.speedup_compile is not None:
            parts.append(f"{report.speedup_compile:.2f}x vs torch.compile")
        timing = report.timings.get("solution")
        trials = f"{len(report.trials)} correctness trials"
        if timing is not None:
            trials += f", {timing.trials} timed trials, median {timing.median_ms:.3f} ms on {report.device}"
        return "correct: " + (", ".join(parts) + "; " if parts else "") + trials
    if status == "mismatch":
        failed = [t for t in report.trials if not t.passed]
        worst = failed[0] if failed else None
        detail = (f"; max abs error {worst.max_abs_error:.3g} at {worst.where}" if worst and worst.where else "")
        return f"wrong result on {len(failed)} of {len(report.trials)} trials{detail}" + (
            f" ({report.message})" if report.message else "")
    if status == "built-not-run":
        return f"built; not run: {report.message or 'no GPU'}"
    if status == "compile-error":
        count = len(report.errors)
        return f"does not compile: {count} error{'s' if count != 1 else ''}" + (
            f" ({report.message})" if report.message and not count else "")
    if status == "cancelled":
        return ""
    return f"{status}: {report.message}" if report.message else status


def kernel_hover(anatomy: Anatomy, report, offset: int) -> str | None:
    """Markdown about the kernel under the cursor: its kind, and its timing from the last check."""
    for source in anatomy.sources:
        for function in source.functions:
            if offset not in function.name_span:
                continue
            lines = [f"**{function.name}** ({'__global__ kernel' if function.kind == 'global' else function.kind})"]
            share = next((k for k in report.kernels if k.name == function.name), None) if report else None
            if share is not None:
                lines.append(f"- {share.share:.1%} of forward GPU time, {share.time_us:.1f} us over "
                             f"{share.launches} launch{'es' if share.launches != 1 else ''}")
            elif report is not None and function.kind == "global":
                lines.append(f"- no timing: last check was `{report.status}`")
            if report is not None and "solution" in report.timings:
                timing = report.timings["solution"]
                lines.append(f"- forward median {timing.median_ms:.3f} ms (spread {timing.spread_ms:.3f} ms, "
                             f"{timing.trials} trials) on {report.device}")
            return "\n".join(lines)
    return None


def hover(markdown: str | None) -> types.Hover | None:
    if markdown is None:
        return None
    return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=markdown))


def code_actions(offers, uri: str) -> list[types.CodeAction]:
    """Each of actions.offers' Offers as a code action whose command takes the file's uri."""
    return [types.CodeAction(title=offer.title, kind=offer.kind,
                             command=types.Command(title=offer.title, command=offer.command, arguments=[uri]))
            for offer in offers]


def code_lenses(anatomy: Anatomy, report, commands, uri: str, encoding: str) -> list[types.CodeLens]:
    """Above `class ModelNew`: the last check's result (`report`, None when there is none), then a lens for each of
    actions.lenses' Offers."""
    if anatomy.model_new is None:
        return []
    where = first_line(LineIndex(anatomy.text), anatomy.model_new.name_span, encoding)
    lenses = [types.CodeLens(range=where, command=types.Command(title=offer.title, command=offer.command,
                                                                arguments=[uri]))
              for offer in commands]
    if report is not None:
        title = result_line(report) or report.status
        lenses.insert(0, types.CodeLens(range=where, command=types.Command(title=title, command="")))
    return lenses


def replace_edit(uri: str, version: int, within: str, span: Span, text: str, encoding: str) -> types.WorkspaceEdit:
    """Replace `span` of the file `uri` (its text `within`, at `version`) by `text`."""
    identifier = types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version)
    where = lsp_range(LineIndex(within), span, encoding)
    return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(text_document=identifier,
                                                                        edits=[types.TextEdit(where, text)])])


def new_file_edit(path: Path, text: str) -> types.WorkspaceEdit:
    """Create the file `path` (never over an existing one) holding `text`."""
    target = path.as_uri()
    start = types.Range(types.Position(0, 0), types.Position(0, 0))
    return types.WorkspaceEdit(document_changes=[
        types.CreateFile(uri=target, options=types.CreateFileOptions(overwrite=False, ignore_if_exists=False)),
        types.TextDocumentEdit(text_document=types.OptionalVersionedTextDocumentIdentifier(uri=target, version=None),
                               edits=[types.TextEdit(start, text)]),
    ])


_MESSAGE_TYPE = {"error": types.MessageType.Error, "warning": types.MessageType.Warning,
                 "info": types.MessageType.Info}


def message(severity: str, text: str) -> types.ShowMessageParams:
    """A message for the user, marked as dice-lsp's."""
    return types.ShowMessageParams(type=_MESSAGE_TYPE[severity], message=f"dice-lsp: {text}")


def command_result(answer: Any) -> dict[str, Any]:
    """A command's answer (the session's Answer or Started) as the JSON the client receives."""
    return asdict(answer)
