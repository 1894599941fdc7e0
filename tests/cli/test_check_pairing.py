"""`dice-lsp check FILE` with one file finds the other the way the editor does: a solution's link first, then its
own Model; a problem's sibling `<name>_dice.py`; otherwise one line that says what to pass."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from dice_lsp.commands.check import locate
from dice_lsp.commands.errors import CommandError

FILES = Path(__file__).parent.parent / "anatomy" / "files"


def one_file(path: Path) -> argparse.Namespace:
    return argparse.Namespace(reference=path, solution=None)


def test_a_solution_follows_its_link_before_its_own_model(tmp_path):
    problem = tmp_path / "problem.py"
    problem.write_text((FILES / "honest_add_with_model.py").read_text())
    solution = tmp_path / "linked.py"
    solution.write_text("# dice: reference = problem.py\n" + (FILES / "honest_add_with_model.py").read_text())
    assert locate(one_file(solution)) == (problem, solution)


def test_a_solution_with_model_and_no_link_is_its_own_problem():
    path = FILES / "honest_add_with_model.py"
    assert locate(one_file(path)) == (path, path)


def test_a_problem_takes_its_sibling_solution(tmp_path):
    problem = tmp_path / "add.py"
    problem.write_text("class Model:\n    pass\n")
    with pytest.raises(CommandError, match="add_dice.py does not exist"):
        locate(one_file(problem))
    (tmp_path / "add_dice.py").write_text("class ModelNew:\n    pass\n")
    assert locate(one_file(problem)) == (problem, tmp_path / "add_dice.py")


def test_a_solution_without_a_reference_says_what_to_pass(tmp_path):
    solution = tmp_path / "alone.py"
    solution.write_text("class ModelNew:\n    pass\n")
    with pytest.raises(CommandError, match="names no reference; pass the problem file first"):
        locate(one_file(solution))
