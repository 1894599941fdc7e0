"""The harness benchmarks' problems, made from the harness tests' fixture files.

`add`: one elementwise CUDA kernel against `a + b` (512x512 inputs, or NxN). `matmul`: the same kernel applied to
`torch.mm(a, b)` against `a @ b + b`, NxN fp32: a compute-bound forward of milliseconds (~5 ms on an H200 at 4864).
"""

from __future__ import annotations

from pathlib import Path

FILES = Path(__file__).resolve().parent.parent / "tests" / "harness" / "files"


def add(size: int = 512) -> tuple[str, str]:
    """(reference, solution) texts."""
    reference = (FILES / "add_reference.py").read_text().replace("512, 512", f"{size}, {size}")
    return reference, (FILES / "cuda_solution.py").read_text()


def matmul(size: int, solution: str | None = None) -> tuple[str, str]:
    """(reference, solution) texts; `solution`: the add solution to turn into the matmul one (the fixture's own
    text by default; a benchmark passes the one it renamed, so the extension it built is reused)."""
    reference, fixture = add(size)
    reference = reference.replace("return a + b", "return a @ b + b")
    solution = (solution or fixture).replace("return self.add.add_cuda(a, b)",
                                             "return self.add.add_cuda(torch.mm(a, b), b)")
    assert "a @ b" in reference and "torch.mm" in solution, "the fixtures changed: update benchmarks/fixtures.py"
    return reference, solution
