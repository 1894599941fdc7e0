"""Which code actions a file offers, where a generated solution goes, and how a reference is found.

Pure functions over an Anatomy and paths: the server turns their answers into LSP code actions and edits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from dice_lsp.anatomy import Anatomy, Split

GENERATE = "dice.server.generate"
INFILL = "dice.server.infill"
BENCHMARK = "dice.server.benchmark"

_TODO = re.compile(r"\bTODO\b|\bFIXME\b|\.\.\.", re.IGNORECASE)


@dataclass(frozen=True)
class Offer:
    title: str
    command: str
    kind: str  # an LSP CodeActionKind value


def empty_core(anatomy: Anatomy) -> Split | None:
    """The split whose CUDA source is empty or a TODO (a skeleton to infill), if any."""
    for split in anatomy.splits:
        value = split.source.value
        if not value.strip() or (_TODO.search(value) and "__global__" not in value):
            return split
    return None


def offers(anatomy: Anatomy, offset: int | None) -> list[Offer]:
    """Code actions for the cursor at `offset` (None: anywhere in the file)."""
    out = []
    if anatomy.model is not None and (offset is None or anatomy.model_new is None or offset in anatomy.model.span):
        out.append(Offer("Generate CUDA kernel", GENERATE, "refactor.rewrite"))
    if anatomy.model_new is not None:
        if empty_core(anatomy) is not None:
            out.append(Offer("Infill kernel core", INFILL, "refactor.rewrite"))
        out.append(Offer("Benchmark now", BENCHMARK, "source"))
    return out


def reference_for(anatomy: Anatomy, path: Path | None) -> tuple[str | None, Path | None, str | None]:
    """(reference text, its path, why there is none) for a solution; the file itself when it holds Model."""
    if anatomy.model is not None:
        return anatomy.text, path, None
    if anatomy.reference_link is None:
        return None, None, ("ModelNew has no reference: put `class Model` in this file or link the problem with "
                            "a comment `# dice: reference = path/to/problem.py`")
    if path is None:
        return None, None, "the reference link cannot be followed from an unsaved file"
    target = Path(anatomy.reference_link).expanduser()
    if not target.is_absolute():
        target = path.parent / target
    try:
        return target.read_text(encoding="utf-8"), target, None
    except OSError as error:
        return None, target, f"the linked reference {target} cannot be read: {error.strerror or error}"


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
