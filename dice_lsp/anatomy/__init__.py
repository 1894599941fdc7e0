"""The one place that understands a kernel file: `parse(text)` returns its `Anatomy`.

Everything else in dice-lsp (server, engine, harness, training, eval) reads kernel files through this package.
"""

from __future__ import annotations

from dataclasses import replace

from dice_lsp.anatomy.findings import find_deceptions
from dice_lsp.anatomy.pairing import Pairing, core_split, find_reference, infill_split, read_reference
from dice_lsp.anatomy.positions import Encoding, LineIndex
from dice_lsp.anatomy.reader import FileReader, Reading, reference_link
from dice_lsp.anatomy.recovery import blank_broken, broken_statements
from dice_lsp.anatomy.types import (
    Anatomy,
    Call,
    ClassInfo,
    CudaFunction,
    Extension,
    Finding,
    Piece,
    Related,
    SourceString,
    Span,
    Split,
)

MAX_BYTES = 5 * 1024 * 1024

__all__ = [
    "Anatomy", "Call", "ClassInfo", "CudaFunction", "Encoding", "Extension", "Finding", "LineIndex", "Piece",
    "Pairing", "Related", "SourceString", "Span", "Split", "core_split", "find_reference", "infill_split", "parse",
    "read_reference",
]


def parse(text: str, reference: Anatomy | str | None = None) -> Anatomy:
    """Read `text` as a kernel file. Never raises: what cannot be read is explained in `Anatomy.notes`.

    `reference` (the problem's text or its Anatomy) sharpens the checks when Model lives in another file.
    """
    if not isinstance(text, str):
        return Anatomy(text="", notes=("not text: dice-lsp reads Python source files",))
    if len(text) > MAX_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        return Anatomy(text=text, notes=("file is larger than 5 MB; dice-lsp does not analyse it",))
    if "\x00" in text:
        return Anatomy(text=text, notes=("binary file (it holds NUL bytes); dice-lsp reads Python source files",))
    if not text.strip():
        return Anatomy(text=text, notes=("empty file",))
    try:
        reader = FileReader(text)
        reading = reader.read()
        reader, reading, recovered = _recover(text, reader, reading)
    except Exception as error:  # tree-sitter is robust, but a crash here must never take the server down
        return Anatomy(text=text, notes=(f"could not read the file ({type(error).__name__}: {error})",))

    notes: list[str] = []
    if recovered:
        notes.append("the file has an unfinished statement; it is skipped and the code after it is read")
    elif reading.syntax_errors:
        notes.append("the file has syntax errors; what follows is read from the parts that parse")
    link = reference_link(text)
    if reading.model is None and reading.model_new is None:
        notes.append("no `class Model` or `class ModelNew`: not a KernelBench problem or solution")
    if reading.model is not None and reading.get_inputs is None:
        notes.append("`class Model` has no `get_inputs()` beside it, so it cannot be run")
    if reading.model_new is not None and not reading.extensions:
        notes.append("`class ModelNew` compiles no extension: no `load_inline(...)` call found")
    notes.extend(reading.notes)
    splits = tuple(
        Split(Span(0, source.statement.start), source.statement, Span(source.statement.end, len(text)), source)
        for extension in reading.extensions
        for source in extension.cuda_sources
        if source.variable is not None
    )
    anatomy = Anatomy(
        text=text,
        model=reading.model,
        model_new=reading.model_new,
        get_inputs=reading.get_inputs,
        get_init_inputs=reading.get_init_inputs,
        extensions=tuple(reading.extensions),
        splits=_distinct(splits),
        reference_link=link[0] if link else None,
        reference_link_span=link[1] if link else None,
        syntax_errors=tuple(reading.syntax_errors),
        notes=tuple(notes),
    )
    if isinstance(reference, str):
        reference = parse(reference)
    try:
        findings = find_deceptions(anatomy, reader, reading, reference)
    except Exception as error:  # a check that trips over odd code loses its finding, not the anatomy
        findings = ()
        anatomy = _with_notes(anatomy, f"deception checks failed ({type(error).__name__}: {error})")
    return replace(anatomy, findings=tuple(findings))


def _recover(text: str, reader: FileReader, reading: Reading) -> tuple[FileReader, Reading, bool]:
    """Re-read a file whose unfinished statement swallowed the code after it (a call or string still open)."""
    broken = broken_statements(reader.tree.root_node, reader.offsets)
    blanked = blank_broken(text, broken) if broken else None
    if blanked is None:
        return reader, reading, False
    again = FileReader(blanked)
    second = again.read()
    second.syntax_errors = reading.syntax_errors  # the user's file still has them, where they are
    return again, second, True


def _distinct(splits: tuple[Split, ...]) -> tuple[Split, ...]:
    seen, out = set(), []
    for split in splits:
        if split.core not in seen:
            seen.add(split.core)
            out.append(split)
    return tuple(sorted(out, key=lambda s: s.core.start))


def _with_notes(anatomy: Anatomy, note: str) -> Anatomy:
    return replace(anatomy, notes=anatomy.notes + (note,))
