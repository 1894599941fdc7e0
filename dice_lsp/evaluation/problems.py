"""Problem sets in KernelBench layout (`level1/*.py`, `level2/*.py`, ...) and solution files laid out the same way.

A solution for sample K of `levelN/NAME.py` is `levelN/NAME_sampleK.py` (K from 0); plain `levelN/NAME.py` is sample 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from dice_lsp.evaluation.errors import EvaluationError

_LEVEL = re.compile(r"level(\d+)$")
_SAMPLE = re.compile(r"(.+)_sample(\d+)$")


@dataclass(frozen=True)
class Problem:
    """One KernelBench problem: `class Model`, `get_inputs`, `get_init_inputs` in `levelN/NAME.py`."""

    level: int
    name: str  # the file's stem, e.g. "19_ReLU"
    path: Path

    @property
    def key(self) -> str:
        return f"level{self.level}/{self.name}"

    def read(self) -> str:
        return read_text(self.path)


def read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8", errors="replace")
    except OSError as error:
        raise EvaluationError(f"cannot read {path}: {error.strerror or error}") from error


def parse_levels(text: str | None) -> tuple[int, ...] | None:
    """`"1,2,3"` -> (1, 2, 3); None or "" -> None (every level found)."""
    if not text:
        return None
    try:
        levels = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        raise EvaluationError(f"--levels {text!r} is not a comma-separated list of level numbers, e.g. 1,2,3") from None
    if not levels or any(level < 1 for level in levels):
        raise EvaluationError(f"--levels {text!r}: levels are numbered from 1, e.g. 1,2,3")
    return levels


def find_problems(root: Path, levels: tuple[int, ...] | None = None) -> list[Problem]:
    """The problems under `root/levelN/` for the requested levels, ordered by level then by KernelBench number."""
    if not root.is_dir():
        raise EvaluationError(f"{root} is not a directory; give a folder in KernelBench layout (level1/*.py, ...)")
    found = {int(m.group(1)): path for path in root.iterdir() if path.is_dir() and (m := _LEVEL.match(path.name))}
    if not found:
        raise EvaluationError(f"{root} holds no level1/, level2/, ... folders; give a folder in KernelBench layout")
    missing = [level for level in levels or () if level not in found]
    if missing:
        have = ", ".join(str(level) for level in sorted(found))
        raise EvaluationError(f"{root} has no level{missing[0]}/ (levels found: {have}); fix --levels")
    problems = [Problem(level, path.stem, path)
                for level in sorted(levels or found)
                for path in sorted(found[level].glob("*.py"), key=_number_then_name)
                if not path.name.startswith((".", "_"))]
    for problem in problems:  # its name is shown in progress lines and kept in every record
        if not problem.name.isprintable():
            raise EvaluationError(f"{ascii(str(problem.path))}: a problem's file name must be printable (no control "
                                  "or format characters); rename it")
    if not problems:
        raise EvaluationError(f"no problem files (*.py) under the chosen levels of {root}")
    return problems


def _number_then_name(path: Path) -> tuple[int, str]:
    head = path.stem.split("_", 1)[0]
    return (int(head) if head.isdigit() else 1 << 30, path.stem)


def solution_files(root: Path, problem: Problem) -> dict[int, Path]:
    """Sample index -> solution file for `problem` under `root` (same layout); empty when there is none."""
    folder = root / f"level{problem.level}"
    files: dict[int, Path] = {}
    plain = folder / f"{problem.name}.py"
    if plain.is_file():
        files[0] = plain
    for path in folder.glob(f"{glob_escape(problem.name)}_sample*.py"):
        match = _SAMPLE.match(path.stem)
        if match and match.group(1) == problem.name:
            files[int(match.group(2))] = path
    return files


def solution_path(root: Path, problem: Problem, sample: int) -> Path:
    """Where sample `sample` of `problem` is written under `root` (eval writes generated kernels here)."""
    return root / f"level{problem.level}" / f"{problem.name}_sample{sample}.py"


def glob_escape(name: str) -> str:
    return re.sub(r"([\[\]*?])", r"[\1]", name)
