"""Fixtures for the eval tests: a three-problem set in KernelBench layout, solutions for it, one shared build cache.

Every solution is `files/solution.py` with its own forward body, so the whole suite builds one C++ extension.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FILES = Path(__file__).parent / "files"
PROBLEMS = {"level1/1_add.py": "add.py", "level1/2_small_sum.py": "small_sum.py", "level2/1_add_relu.py": "add_relu.py"}
TF32 = "torch.backends.cuda.matmul.allow_tf32 = True\n        return self.ext.add_values(a, b)"
# name in the solutions folder -> forward's body. Three samples of 1_add; the other problems have sample 0 only.
SOLUTIONS = {
    "level1/1_add_sample0.py": "return self.ext.add_values(a, b)",  # correct, clean
    "level1/1_add_sample1.py": "return a + b",  # correct, but the kernel never runs: binding-not-called (static)
    "level1/1_add_sample2.py": TF32,  # correct, but changes precision settings (static and at run time)
    "level1/2_small_sum.py": "return self.ext.zeros_of(a, b)",  # zeros within allclose: tiny-output, a mismatch
    "level2/1_add_relu.py": "return self.ext.add_values(a, b)",  # no ReLU: mismatch
}


BUILDING_FIXTURES = {"build_cache", "uninterrupted"}  # a test that asks for either builds the C++ extension


def pytest_collection_modifyitems(config, items):
    """Tests that build are `slow` (pyproject's markers), so `-m "not slow"` runs no compiler: marked here, where the
    fixtures that build are, rather than test by test."""
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here) and BUILDING_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


def solution(forward: str) -> str:
    return (FILES / "solution.py").read_text().replace("FORWARD", forward)


@pytest.fixture(scope="session")
def build_cache(shared_build_cache):
    """DICE_LSP_CACHE for the session (tests/conftest.py), shared with other packages: the extension builds once."""
    return shared_build_cache


@pytest.fixture(scope="session")
def problem_set(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("kernelbench")
    for name, file in PROBLEMS.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(FILES / file, root / name)
    return root


@pytest.fixture(scope="session")
def solutions(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("solutions")
    for name, forward in SOLUTIONS.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(solution(forward))
    return root


def _eval_args(problem_set: Path, solutions: Path, out: Path, *more: str) -> list[str]:
    return ["eval", str(problem_set), "--solutions", str(solutions), "--out", str(out), "--device", "cpu",
            "--baseline", "none", "--timing-trials", "0", "--trials", "2", *more]


@pytest.fixture(scope="session")
def eval_args(problem_set, solutions):
    """`eval_args(out, *more)`: `dice-lsp eval` arguments on CPU with nothing timed, so runs give identical tables."""
    return lambda out, *more: _eval_args(problem_set, solutions, out, *more)


@pytest.fixture(scope="session")
def uninterrupted(build_cache, problem_set, solutions, tmp_path_factory) -> Path:
    """The output folder of one whole `--solutions` run."""
    from dice_lsp.cli import main

    out = tmp_path_factory.mktemp("uninterrupted")
    assert main(_eval_args(problem_set, solutions, out, "--quiet")) == 0
    return out


@pytest.fixture(scope="session")
def solution_text():
    """`solution_text(forward_body)`: a solution file on the shared extension."""
    return solution
