"""The one place where dice-lsp's objects (Anatomy, Report, the session's answers) become LSP types: diagnostics,
code actions and lenses, inlay hints, hovers, edits, messages.

Everything here is pure: it takes text, objects and the negotiated position encoding, and returns lsprotocol values.
Where it matters: problems are diagnostics (a correct kernel much slower than eager is a warning), results are code
lenses and inlay hints, and each finding code links to its row of the README's findings table.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from lsprotocol import converters, types

import dice_lsp
from dice_lsp.anatomy import Anatomy, LineIndex, Related, Span, related

SOURCE = "dice"
# A correct kernel that takes more than twice eager PyTorch's time is a warning: it is slower than the code it replaces
SLOW = 0.5
# The finding codes the README's findings table documents, each in a row with the anchor `finding-<code>`
FINDING_CODES = ("kernel-not-bound", "binding-not-called", "torch-fallback", "one-shot-copy", "exception-fallback",
                 "reference-reuse", "side-stream", "thread", "timer-patch", "precision", "output-cached",
                 "signature-mismatch", "kernel-not-launched", "tiny-output", "timer-mismatch", "crash", "unsandboxed",
                 "lazy-output", "timed-mismatch", "profiled-differently", "input-mutation", "timing-unstable",
                 "inspect-failed", "wall-time", "background-cpu", "build-refused", "socket-refused", "scratch-full",
                 "memory-uncapped")
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


@dataclass(frozen=True)
class Places:
    """Where a diagnostic's related locations point: the file (`uri`), and the reference when `class Model` lives in
    another file (its uri and text, to place Model's lines). Diagnostics made without Places carry none: the client
    did not say it shows them."""

    uri: str
    reference_uri: str | None = None
    reference_text: str | None = None

    def related(self, index: LineIndex, places: tuple[Related, ...], encoding: str
                ) -> list[types.DiagnosticRelatedInformation] | None:
        out = []
        for place in places:
            uri, within = (self.reference_uri, self.reference_text) if place.in_reference else (self.uri, None)
            if uri is None or place.in_reference and within is None:
                continue  # Model's file has no uri (an unsaved buffer) or its text is gone: no place to point at
            where = first_line(LineIndex(within) if within is not None else index, place.span, encoding)
            out.append(types.DiagnosticRelatedInformation(types.Location(uri, where), place.message))
        return out or None


def document_diagnostics(anatomy: Anatomy, reference_missing: str | None, report, encoding: str,
                         places: Places | None = None) -> list[types.Diagnostic]:
    """All of a file's diagnostics: its anatomy's, then its check's (`report`, None when it was of another text),
    leaving out a check's finding where the anatomy already put the same code on that line. With `places`, each
    says the second places it is about (related information)."""
    diagnostics = anatomy_diagnostics(anatomy, encoding, reference_missing, places)
    if report is not None:
        static = {(d.code, d.range.start.line) for d in diagnostics}
        for diagnostic in report_diagnostics(anatomy, report, encoding, places):
            if (diagnostic.code, diagnostic.range.start.line) not in static:
                diagnostics.append(diagnostic)
    return diagnostics


def diagnostic_report(diagnostics: list[types.Diagnostic], previous_result_id: str | None
                      ) -> types.RelatedFullDocumentDiagnosticReport | types.RelatedUnchangedDocumentDiagnosticReport:
    """A pulled report of `diagnostics`, named by a digest of their content: when the client's previous report had
    the same name, it holds these very diagnostics and is told they are unchanged."""
    content = json.dumps(converters.get_converter().unstructure(diagnostics), sort_keys=True)
    result_id = hashlib.sha256(content.encode("utf-8")).hexdigest()[:32]
    if result_id == previous_result_id:
        return types.RelatedUnchangedDocumentDiagnosticReport(result_id=result_id)
    return types.RelatedFullDocumentDiagnosticReport(items=diagnostics, result_id=result_id)


def anatomy_diagnostics(anatomy: Anatomy, encoding: str, reference_missing: str | None = None,
                        places: Places | None = None) -> list[types.Diagnostic]:
    """Static findings, syntax trouble and what is missing for a check, as diagnostics."""
    index = LineIndex(anatomy.text)
    out = []
    for finding in anatomy.findings:
        out.append(finding_diagnostic(index, finding, encoding, places))
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


def report_diagnostics(anatomy: Anatomy, report, encoding: str, places: Places | None = None
                       ) -> list[types.Diagnostic]:
    """A harness Report placed on the lines it is about: compile errors (with the load_inline that compiles their
    source), failures (a wrong result with forward's calls of the compiled functions), run-time findings, speedups."""
    index = LineIndex(anatomy.text)
    out = []
    for diagnostic in report.diagnostics:
        compiler = related.compiled_by(anatomy, diagnostic.span) if diagnostic.span is not None else None
        if diagnostic.span is not None:
            where = lsp_range(index, diagnostic.span, encoding)
        else:
            line = max(0, min(diagnostic.line, len(index.line_starts) - 1))
            where = types.Range(types.Position(line, 0), types.Position(line, len(index.line_text(line))))
        prefix = f"{diagnostic.file}: " if diagnostic.span is None and diagnostic.file else ""
        out.append(types.Diagnostic(range=where, message=prefix + diagnostic.message, source=SOURCE,
                                    severity=_SEVERITY.get(diagnostic.severity, types.DiagnosticSeverity.Error),
                                    code="compile", related_information=places and places.related(
                                        index, (compiler,) if compiler is not None else (), encoding)))
    for finding in report.findings:  # run-time findings; the static ones come from anatomy on every change
        out.append(finding_diagnostic(index, finding, encoding, places))
    anchor = anatomy.model_new.name_span if anatomy.model_new is not None else Span(0, 0)
    headline = result_line(report)
    if headline:
        wrong = related.compiled_calls(anatomy, "forward runs the compiled `{name}` here") \
            if report.status == "mismatch" else ()
        out.append(types.Diagnostic(range=first_line(index, anchor, encoding), message=headline, source=SOURCE,
                                    code=report.status, severity=result_severity(report),
                                    related_information=places and places.related(index, wrong, encoding)))
    for share, kernel in placed_kernels(anatomy, report):  # also an inlay hint: a hint here, out of the problems list
        out.append(types.Diagnostic(
            range=lsp_range(index, kernel.name_span, encoding), source=SOURCE, code="kernel-time",
            severity=types.DiagnosticSeverity.Hint,
            message=f"{share.name}: {share.share:.0%} of forward GPU time ({share.time_us:.1f} us, "
                    f"{share.launches} launch{'es' if share.launches != 1 else ''})",
        ))
    return out


def finding_diagnostic(index: LineIndex, finding, encoding: str, places: Places | None = None) -> types.Diagnostic:
    """A static or run-time finding on the first line it is about, linked to its documentation (and, with `places`,
    to the second places it is about)."""
    return types.Diagnostic(
        range=first_line(index, finding.span, encoding), message=finding.message, code=finding.code, source=SOURCE,
        severity=_SEVERITY.get(finding.severity, types.DiagnosticSeverity.Warning),
        code_description=code_description(finding.code),
        related_information=places and places.related(index, finding.related, encoding),
    )


def code_description(code: str) -> types.CodeDescription | None:
    """The link to a finding code's row in the README's findings table; None for a code it does not document, or
    where no README can be found."""
    page = findings_page()
    if page is None or code not in FINDING_CODES:
        return None
    return types.CodeDescription(href=f"{page}#finding-{code}")


@functools.lru_cache(maxsize=1)
def findings_page() -> str | None:
    """Where the findings table is: the distribution's documentation URL (a Project-URL named "Documentation") when
    it names one, else the README of the source tree this package runs from (an editable install, as the README
    sets it up)."""
    try:
        for entry in metadata.metadata("dice-lsp").get_all("Project-URL") or []:
            label, _, url = entry.partition(",")
            if label.strip().lower() == "documentation" and url.strip():
                return url.strip()
    except metadata.PackageNotFoundError:
        pass
    readme = Path(dice_lsp.__file__).resolve().parent.parent / "README.md"
    return readme.as_uri() if readme.is_file() else None


def result_severity(report) -> types.DiagnosticSeverity:
    """A failed check is an error; a correct kernel much slower than eager a warning; any other result information."""
    if report.status not in ("correct", "built-not-run"):
        return types.DiagnosticSeverity.Error
    if report.status == "correct" and report.speedup_eager is not None and report.speedup_eager < SLOW:
        return types.DiagnosticSeverity.Warning
    return types.DiagnosticSeverity.Information


def placed_kernels(anatomy: Anatomy, report):
    """(KernelShare, CudaFunction) for each of the file's own kernels that the check timed."""
    for share in report.kernels:
        kernel = anatomy.function(share.name)
        if kernel is not None and share.own:
            yield share, kernel


def speedup(value: float, against: str) -> str:
    """"1.80x vs eager"; a kernel far slower says by how much ("0.0033x vs eager, 300x slower")."""
    shown = f"{value:.2f}x" if value >= 0.01 else f"{value:.2g}x"
    return f"{shown} vs {against}" + (f", {1 / value:.0f}x slower" if 0 < value < SLOW else "")


def result_line(report) -> str:
    """The headline shown on `class ModelNew` and in the code lens."""
    status = report.status
    if status == "correct":
        parts = []
        if report.speedup_eager is not None:
            parts.append(speedup(report.speedup_eager, "eager"))
        if report.speedup_compile is not None:
            parts.append(speedup(report.speedup_compile, "torch.compile"))
        timing = report.timings.get("solution")
        trials = f"{len(report.trials)} correctness trials"
        if timing is not None:
            trials += f", {timing.trials} timed trials, median {timing.median_ms:.3f} ms on {report.device}"
        return "correct: " + (", ".join(parts) + "; " if parts else "") + trials
    if status == "mismatch":
        failed = [t for t in report.trials if not t.passed]
        worst = failed[0] if failed else None
        # The harness's message names the worst element and its seed already; say it once
        detail = (f": {report.message}" if report.message else
                  f"; max abs error {worst.max_abs_error:.3g} at {worst.where}" if worst and worst.where else "")
        return f"wrong result on {len(failed)} of {len(report.trials)} trials{detail}"
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


def quick_fixes(fixes, uri: str, version: int, text: str, encoding: str) -> list[types.CodeAction]:
    """Each of actions.fixes' Fixes as a quick fix of its finding's diagnostic, applied as an edit of the file at
    `version` (the editor refuses it once the text has changed)."""
    index = LineIndex(text)
    return [types.CodeAction(
        title=fix.title, kind=types.CodeActionKind.QuickFix, is_preferred=True,
        diagnostics=[finding_diagnostic(index, fix.finding, encoding)],
        edit=replace_edit(uri, version, text, fix.span, fix.text, encoding)) for fix in fixes]


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


def inlay_hints(anatomy: Anatomy, report, encoding: str, lines: range | None = None) -> list[types.InlayHint]:
    """The last check's result at the end of the `class ModelNew` line, and each timed kernel's share of GPU time at
    the end of its line (only those on `lines`, when given); none without a check of this text (`report` None)."""
    if report is None or anatomy.model_new is None:
        return []
    index = LineIndex(anatomy.text)
    places = [(anatomy.model_new.name_span, short_result(report), result_line(report))]
    places += [(kernel.name_span, f"{share.share:.0%} of GPU time, {share.time_us:.1f} us",
                f"{share.name}: {share.launches} launch{'es' if share.launches != 1 else ''} per forward")
               for share, kernel in placed_kernels(anatomy, report)]
    hints = []
    for span, label, tooltip in places:
        line = index.line_of(span.start)
        if label and (lines is None or line in lines):
            end = index.position(index.line_starts[line] + len(index.line_text(line)), encoding)  # type: ignore
            hints.append(types.InlayHint(position=types.Position(*end), label=label, padding_left=True,
                                         tooltip=tooltip))
    return hints


def short_result(report) -> str:
    """A check's result in a few words, for an inlay hint: "correct, 1.80x vs eager", "wrong result"."""
    if report.status == "correct":
        return "correct" + (f", {speedup(report.speedup_eager, 'eager')}" if report.speedup_eager is not None else "")
    return {"mismatch": "wrong result", "compile-error": "does not compile", "cancelled": "",
            "built-not-run": "built, not run"}.get(report.status, report.status)


CONFIRM = "dice-generated"  # the change annotation of generated edits


def replace_edit(uri: str, version: int, within: str, span: Span, text: str, encoding: str,
                 confirm: str | None = None) -> types.WorkspaceEdit:
    """Replace `span` of the file `uri` (its text `within`, at `version`) by `text`. With `confirm` (a label), the
    edit carries a change annotation that needs the user's confirmation: the editor shows it before applying."""
    identifier = types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version)
    where = lsp_range(LineIndex(within), span, encoding)
    if confirm is None:
        return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(text_document=identifier,
                                                                            edits=[types.TextEdit(where, text)])])
    annotation = types.ChangeAnnotation(label=confirm, needs_confirmation=True,
                                        description="written by the model: review it before it is applied")
    return types.WorkspaceEdit(
        document_changes=[types.TextDocumentEdit(text_document=identifier, edits=[
            types.AnnotatedTextEdit(range=where, new_text=text, annotation_id=CONFIRM)])],
        change_annotations={CONFIRM: annotation})


_MESSAGE_TYPE = {"error": types.MessageType.Error, "warning": types.MessageType.Warning,
                 "info": types.MessageType.Info}


def message(severity: str, text: str) -> types.ShowMessageParams:
    """A message for the user, marked as dice-lsp's."""
    return types.ShowMessageParams(type=_MESSAGE_TYPE[severity], message=f"dice-lsp: {text}")


def command_result(answer: Any) -> dict[str, Any]:
    """A command's answer (the session's Answer or Started) as the JSON the client receives."""
    return asdict(answer)
