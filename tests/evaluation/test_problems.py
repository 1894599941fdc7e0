"""Reading a KernelBench-layout problem set and the solution files beside it, and the errors a user can act on."""

from __future__ import annotations

import pytest

from dice_lsp.evaluation import EvaluationError, find_problems, parse_levels
from dice_lsp.evaluation.problems import solution_files
from dice_lsp.evaluation.sources import SolutionFiles


def touch(root, *names):
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("# problem\n")


def test_problems_are_ordered_by_level_then_kernelbench_number(tmp_path):
    touch(tmp_path, "level1/10_b.py", "level1/2_a.py", "level2/1_c.py", "level3/1_d.py", "level1/_skip.py",
          "level1/notes.txt")
    assert [p.key for p in find_problems(tmp_path)] == ["level1/2_a", "level1/10_b", "level2/1_c", "level3/1_d"]
    assert [p.key for p in find_problems(tmp_path, (2, 3))] == ["level2/1_c", "level3/1_d"]


def test_levels_flag():
    assert parse_levels("3,1, 2") == (1, 2, 3)
    assert parse_levels(None) is None
    for bad in ("one", "0", "1;2"):
        with pytest.raises(EvaluationError, match="--levels"):
            parse_levels(bad)


def test_a_missing_level_or_layout_says_what_is_there(tmp_path):
    touch(tmp_path, "level1/1_a.py")
    with pytest.raises(EvaluationError, match=r"no level2/ \(levels found: 1\)"):
        find_problems(tmp_path, (2,))
    with pytest.raises(EvaluationError, match="KernelBench layout"):
        find_problems(tmp_path / "level1")
    with pytest.raises(EvaluationError, match="not a directory"):
        find_problems(tmp_path / "nowhere")


def test_solution_files_by_sample_index(tmp_path):
    touch(tmp_path, "problems/level1/1_add.py", "problems/level1/1_add_more.py")
    touch(tmp_path, "sols/level1/1_add.py", "sols/level1/1_add_sample2.py", "sols/level1/1_add_more_sample0.py")
    add, more = find_problems(tmp_path / "problems")
    assert {k: v.name for k, v in solution_files(tmp_path / "sols", add).items()} == {0: "1_add.py",
                                                                                       2: "1_add_sample2.py"}
    assert list(solution_files(tmp_path / "sols", more)) == [0]
    source = SolutionFiles(tmp_path / "sols")
    assert source.count([add, more]) == 3
    kernels = source.kernels(add, "", [0, 1])
    assert kernels[0].text == "# problem\n" and kernels[1].text is None
    assert kernels[1].note == "no solution file level1/1_add_sample1.py"


def test_a_problem_named_with_control_characters_is_refused(tmp_path):
    """Its name would reach the terminal in progress lines; a forged file name is refused, never printed."""
    (tmp_path / "level1").mkdir()
    (tmp_path / "level1" / "1_add\x1b[2K.py").write_text("class Model: ...\n")
    with pytest.raises(EvaluationError, match=r"must be printable .*rename it"):
        find_problems(tmp_path)
