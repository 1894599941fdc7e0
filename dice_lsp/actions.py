"""Which code actions a file offers and where a generated solution goes.

Pure functions over an Anatomy and paths: the server turns their answers into LSP code actions and edits.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dice_lsp.anatomy import Anatomy, infill_split

GENERATE = "dice.server.generate"
INFILL = "dice.server.infill"
BENCHMARK = "dice.server.benchmark"

@dataclass(frozen=True)
class Offer:
    title: str
    command: str
    kind: str  # an LSP CodeActionKind value


def offers(anatomy: Anatomy, offset: int | None) -> list[Offer]:
    """Code actions for the cursor at `offset` (None: anywhere in the file)."""
    out = []
    if anatomy.model is not None and (offset is None or anatomy.model_new is None or offset in anatomy.model.span):
        out.append(Offer("Generate CUDA kernel", GENERATE, "refactor.rewrite"))
    if anatomy.model_new is not None:
        if infill_split(anatomy) is not None:
            out.append(Offer("Infill kernel core", INFILL, "refactor.rewrite"))
        out.append(Offer("Benchmark now", BENCHMARK, "source"))
    return out


def solution_path(reference: Path) -> Path:
    """Where "Generate" writes a solution beside its problem: foo.py -> foo_dice.py (then _dice2, ...)."""
    candidate = reference.with_name(f"{reference.stem}_dice.py")
    number = 2
    while candidate.exists():
        candidate = reference.with_name(f"{reference.stem}_dice{number}.py")
        number += 1
    return candidate


def with_reference_link(solution: str, reference: Path, solution_file: Path) -> str:
    """The solution with a visible link to its problem after the leading comments/docstring-free import block."""
    try:
        relative = reference.relative_to(solution_file.parent)
    except ValueError:
        relative = reference
    link = f"# dice: reference = {relative.as_posix()}\n"
    if "# dice: reference" in solution:
        return solution
    return link + solution
