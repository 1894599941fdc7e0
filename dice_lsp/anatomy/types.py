"""The typed model of a kernel file that the rest of dice-lsp reads.

Every offset is an index into the Python file's text (a `str`, so code points), unless a name says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Severity = Literal["error", "warning", "information", "hint"]
Role = Literal["cuda", "cpp"]
FunctionKind = Literal["global", "device", "host"]


@dataclass(frozen=True)
class Span:
    """A half-open range [start, end) of offsets into the file's text."""

    start: int
    end: int

    def __contains__(self, offset: int) -> bool:
        return self.start <= offset < self.end

    def slice(self, text: str) -> str:
        return text[self.start : self.end]


@dataclass(frozen=True)
class Piece:
    """One run of a string literal's value whose characters map one to one onto the file's text.

    Value offsets [value_start, value_start + length) come from text offsets [text_start, text_start + length).
    A run of length 0 marks an escape sequence or a join between literals: the value's character at
    `value_start` came from the text at `text_start` (the backslash), which has no one-to-one counterpart.
    """

    value_start: int
    text_start: int
    length: int


@dataclass(frozen=True)
class CudaFunction:
    """A function defined inside a C++/CUDA source string."""

    name: str
    kind: FunctionKind  # "global": __global__ kernel; "device": __device__ helper; "host": host code (launchers)
    span: Span  # the whole definition, in the Python file
    name_span: Span  # the function's name, in the Python file
    value_span: Span  # the whole definition, as offsets into the source string's value


@dataclass(frozen=True)
class SourceString:
    """A C++ or CUDA source string that a load_inline call compiles, with a map back into the Python file."""

    variable: str | None  # the name it was assigned to (None for a literal written inline in the call)
    role: Role  # "cuda" for cuda_sources=, "cpp" for cpp_sources=
    value: str  # the string's value, as Python evaluates it
    statement: Span  # the assignment statement (the DICE core for a CUDA source), or the literal itself
    literal: Span  # the string expression (right-hand side)
    pieces: tuple[Piece, ...]
    functions: tuple[CudaFunction, ...] = ()
    parse_errors: tuple[Span, ...] = ()  # C++/CUDA syntax errors, in the Python file

    def text_offset(self, value_offset: int) -> int:
        """Map an offset into `value` to the offset in the Python file that produced that character."""
        best = self.pieces[0] if self.pieces else Piece(0, self.literal.start, 0)
        for piece in self.pieces:
            if piece.value_start <= value_offset:
                best = piece
            else:
                break
        delta = value_offset - best.value_start
        if best.length == 0:
            return best.text_start
        if delta >= best.length:  # past the end of a run: the character after it in the file
            return best.text_start + best.length
        return best.text_start + delta

    def value_offset_at(self, line: int, column: int) -> int:
        """Offset into `value` of 1-based `line` and 1-based `column` (as compilers report), clamped to the line."""
        lines = self.value.split("\n")
        line = max(1, min(line, len(lines)))
        start = sum(len(text) + 1 for text in lines[: line - 1])
        column = max(1, min(column, len(lines[line - 1]) + 1))
        return start + column - 1


@dataclass(frozen=True)
class Extension:
    """A `load_inline(...)` call and everything it compiles and binds."""

    name: str | None  # the name= argument
    call: Span
    statement: Span  # the statement holding the call
    variable: str | None  # the module-level name the loaded extension is assigned to
    cuda_sources: tuple[SourceString, ...]
    cpp_sources: tuple[SourceString, ...]
    functions: tuple[str, ...]  # functions=[...]: the host functions that get Python bindings

    @property
    def sources(self) -> tuple[SourceString, ...]:
        return self.cuda_sources + self.cpp_sources


@dataclass(frozen=True)
class Call:
    """A call `receiver.method(...)` or `name(...)` found inside a class body."""

    callee: str  # dotted text of the callee, e.g. "self.elementwise_add.elementwise_add_cuda"
    span: Span


@dataclass(frozen=True)
class ClassInfo:
    """`class Model` or `class ModelNew`."""

    name: str
    span: Span  # the whole class definition
    name_span: Span  # the class name
    bases: tuple[str, ...]
    init: Span | None  # `def __init__`
    forward: Span | None  # `def forward`
    init_params: tuple[str, ...]  # parameter names of __init__ without self
    forward_params: tuple[str, ...]  # parameter names of forward without self
    bindings: dict[str, str] = field(default_factory=dict)  # self.<attr> = <extension variable> in __init__
    forward_calls: tuple[Call, ...] = ()


@dataclass(frozen=True)
class Split:
    """DICE's prefix / core / suffix split for one CUDA source: prefix + core + suffix == text."""

    prefix: Span
    core: Span
    suffix: Span
    source: SourceString


@dataclass(frozen=True)
class Related:
    """A second place a finding is about, where the file shows it (the host function that should launch a kernel
    that never runs, the `except` a failing kernel falls back to): the editor links it beside the finding."""

    span: Span
    message: str
    in_reference: bool = False  # a span of the reference's text (Model in the linked problem file), not this file's


@dataclass(frozen=True)
class Finding:
    """Something about the file a user should know, with a stable code (shared by static and run-time checks)."""

    code: str
    message: str
    span: Span
    severity: Severity = "warning"
    related: tuple[Related, ...] = ()


@dataclass(frozen=True)
class Anatomy:
    """Everything dice-lsp knows about one kernel file. Built by `parse`; never raises."""

    text: str
    model: ClassInfo | None = None
    model_new: ClassInfo | None = None
    get_inputs: Span | None = None
    get_init_inputs: Span | None = None
    extensions: tuple[Extension, ...] = ()
    splits: tuple[Split, ...] = ()
    findings: tuple[Finding, ...] = ()
    reference_link: str | None = None  # a path written visibly in the file: `# dice: reference = path/to/model.py`
    reference_link_span: Span | None = None
    syntax_errors: tuple[Span, ...] = ()
    notes: tuple[str, ...] = ()  # one line each: why something is missing

    @property
    def is_reference(self) -> bool:
        return self.model is not None

    @property
    def is_solution(self) -> bool:
        return self.model_new is not None

    @property
    def sources(self) -> tuple[SourceString, ...]:
        return tuple(source for extension in self.extensions for source in extension.sources)

    @property
    def cuda_sources(self) -> tuple[SourceString, ...]:
        return tuple(source for extension in self.extensions for source in extension.cuda_sources)

    @property
    def kernels(self) -> tuple[CudaFunction, ...]:
        return tuple(f for source in self.sources for f in source.functions if f.kind == "global")

    def function(self, name: str) -> CudaFunction | None:
        for source in self.sources:
            for function in source.functions:
                if function.name == name:
                    return function
        return None
