"""`dice-lsp inspect FILE... [--json]`: print each kernel file's anatomy and its static deception findings.

A reference linked from a file (`# dice: reference = path`) is read too, to sharpen the checks. Findings print as
`file:line:col: severity [code] message`, the form editors and CI problem matchers read, and the exit status says
whether any was a warning or an error (EXIT_CODES), so `dice-lsp inspect` can gate a CI job.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dice_lsp.anatomy import Anatomy, LineIndex, Span, find_reference, parse
from dice_lsp.commands.errors import CommandError
from dice_lsp.commands.terminal import shown

FAILING = ("warning", "error")  # finding severities that make the exit status 1
EXIT_CODES = "0: no warning or error findings; 1: some; 2: a file could not be read"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("inspect", help="show kernel files' anatomy and deception findings",
                                   epilog=f"exit status {EXIT_CODES}")
    parser.add_argument("files", type=Path, nargs="+", metavar="FILE", help="KernelBench problems or solutions (.py)")
    parser.add_argument("--reference", type=Path, help="the problem file, when Model is not in the FILEs")
    parser.add_argument("--json", action="store_true",
                        help="print JSON instead of text: an object for one FILE, a list of them for several")
    parser.set_defaults(run=run)


def read_source(path: Path) -> str:
    """A file's text for parsing; undecodable bytes become U+FFFD so that a binary file is reported, not fatal."""
    try:
        return path.read_bytes().decode("utf-8", errors="replace")
    except OSError as error:
        raise CommandError(f"cannot read {path}: {error.strerror or error}") from error


def resolve_reference(path: Path, anatomy: Anatomy) -> Path | None:
    """The problem file a solution links to (the rule is `anatomy.find_reference`'s); None without a link."""
    if anatomy.reference_link is None:
        return None
    return find_reference(anatomy, path).path


def read_linked(path: Path, anatomy: Anatomy) -> tuple[str, Path] | None:
    """The text and path of the problem a file links to (`# dice: reference = ...`), read as the server reads it
    (`anatomy.read_reference`): a regular file of a bounded size only, never a FIFO, a device or /dev/stdin, which
    could block or never end; CommandError with the reason otherwise. None without a link."""
    if anatomy.reference_link is None:
        return None
    pairing = find_reference(anatomy, path)
    if pairing.text is None or pairing.path is None:
        raise CommandError(pairing.problem or f"the reference link of {path} cannot be followed")
    return pairing.text, pairing.path


def read(path: Path, reference_path: Path | None) -> tuple[Anatomy, Path | None]:
    """A file's anatomy, sharpened by its reference (given, else linked); raises CommandError when unreadable."""
    text = read_source(path)
    anatomy = parse(text)
    if reference_path is not None:
        return parse(text, parse(read_source(reference_path))), reference_path
    linked = read_linked(path, anatomy)
    if linked is not None:
        return parse(text, parse(linked[0])), linked[1]
    return anatomy, None


def run(args: argparse.Namespace) -> int:
    """Every file in turn: one that cannot be read is said on stderr and the others are still inspected."""
    documents, failing, unreadable = [], False, False
    for path in args.files:
        try:
            anatomy, reference_path = read(path, args.reference)
        except CommandError as error:
            print(shown(f"dice-lsp inspect: {error}"), file=sys.stderr)
            unreadable = True
            continue
        failing |= any(f.severity in FAILING for f in anatomy.findings)
        if args.json:
            documents.append({"path": str(path), **to_json(anatomy, reference_path)})
        else:
            print(render(anatomy, path, reference_path))
    if args.json and documents:
        print(json.dumps(documents[0] if len(args.files) == 1 else documents, indent=2))
    return 2 if unreadable else 1 if failing else 0


def _where(index: LineIndex, span: Span) -> dict:
    start_line, start_col = index.position(span.start, "utf-32")
    end_line, end_col = index.position(span.end, "utf-32")
    return {"start": span.start, "end": span.end, "line": start_line + 1, "column": start_col + 1,
            "end_line": end_line + 1, "end_column": end_col + 1}


def to_json(anatomy: Anatomy, reference_path: Path | None = None) -> dict:
    index = LineIndex(anatomy.text)

    def where(span: Span | None):
        return _where(index, span) if span is not None else None

    def klass(info):
        if info is None:
            return None
        return {"name": info.name, "where": where(info.name_span), "bases": list(info.bases),
                "init_params": list(info.init_params), "forward_params": list(info.forward_params),
                "bindings": info.bindings, "forward_calls": [c.callee for c in info.forward_calls]}

    return {
        "model": klass(anatomy.model),
        "model_new": klass(anatomy.model_new),
        "get_inputs": where(anatomy.get_inputs),
        "get_init_inputs": where(anatomy.get_init_inputs),
        "reference_link": anatomy.reference_link,
        "reference_path": str(reference_path) if reference_path else None,
        "extensions": [
            {
                "name": e.name, "variable": e.variable, "where": where(e.call), "functions": list(e.functions),
                "sources": [
                    {"variable": s.variable, "role": s.role, "where": where(s.statement), "chars": len(s.value),
                     "functions": [{"name": f.name, "kind": f.kind, "where": where(f.name_span)} for f in s.functions]}
                    for s in e.sources
                ],
            }
            for e in anatomy.extensions
        ],
        "splits": [{"source": s.source.variable, "prefix": where(s.prefix), "core": where(s.core),
                    "suffix": where(s.suffix)} for s in anatomy.splits],
        "findings": [{"code": f.code, "severity": f.severity, "message": f.message, "where": where(f.span)}
                     for f in anatomy.findings],
        "syntax_errors": [where(s) for s in anatomy.syntax_errors],
        "notes": list(anatomy.notes),
    }


def render(anatomy: Anatomy, path: Path, reference_path: Path | None) -> str:
    index = LineIndex(anatomy.text)

    def line(span: Span) -> str:
        row, column = index.position(span.start, "utf-32")
        return f"{row + 1}:{column + 1}"

    out = [f"{path}"]
    if anatomy.model is not None:
        inputs = "get_inputs " + ("ok" if anatomy.get_inputs else "MISSING")
        out.append(f"  reference  class Model at {line(anatomy.model.name_span)}  ({inputs})")
    elif reference_path is not None:
        out.append(f"  reference  {reference_path}")
    if anatomy.model_new is not None:
        out.append(f"  solution   class ModelNew at {line(anatomy.model_new.name_span)}")
    for extension in anatomy.extensions:
        out.append(f"  extension  {extension.name or '?'} = {extension.variable or '(unassigned)'} at "
                   f"{line(extension.call)}, binds {', '.join(extension.functions) or 'nothing'}")
        for source in extension.sources:
            variable = source.variable or "(inline literal)"
            out.append(f"    {source.role:4} source {variable} at {line(source.statement)}")
            for function in source.functions:
                out.append(f"      {function.kind:6} {function.name} at {line(function.name_span)}")
    for split in anatomy.splits:
        core_start, core_end = index.line_of(split.core.start) + 1, index.line_of(split.core.end) + 1
        out.append(f"  DICE split for {split.source.variable}: prefix lines 1-{core_start - 1}, core lines "
                   f"{core_start}-{core_end}, suffix lines {core_end}-{len(index.line_starts)}")
    for note in anatomy.notes:
        out.append(f"  note: {note}")
    out.append(f"  findings: {len(anatomy.findings) or 'none'}")
    for finding in anatomy.findings:  # unindented, as compilers and linters print them
        out.append(f"{path}:{line(finding.span)}: {finding.severity} [{finding.code}] {finding.message}")
    # Names, notes and messages come from the file: every line is shown escaped
    return "\n".join(shown(text) for text in out)
