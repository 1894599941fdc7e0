"""Where a generated solution goes: the core of the TODO source for Infill, a linked new file or the file's end."""

from __future__ import annotations

from pathlib import Path

import pytest

from dice_lsp import actions
from dice_lsp.anatomy import parse
from dice_lsp.engine import prompts

FILES = Path(__file__).parent / "files"
PROBLEM = (FILES / "relu.py").read_text()
TWO_SOURCES = (FILES / "two_sources_dice.py").read_text()  # a real kernel's source, then a TODO source
TODO = "// TODO: write the ReLU kernel and its launcher"
RELU_KERNEL = "__global__ void relu_kernel(const float* x, float* y, int n) {}"


def test_infill_replaces_the_core_of_the_todo_source_not_the_first_one():
    anatomy = parse(TWO_SOURCES)
    spliced = prompts.splice(TWO_SOURCES, TWO_SOURCES.replace(TODO, RELU_KERNEL))
    edit = actions.solution_edit(anatomy, spliced, infill=True, path=None, location="sibling")
    assert isinstance(edit, actions.Replace) and edit.within == TWO_SOURCES
    replaced = TWO_SOURCES[edit.span.start:edit.span.end]
    assert replaced.startswith('relu_source = """') and TODO in replaced and "scale_kernel" not in replaced
    assert TWO_SOURCES[:edit.span.start] + edit.text + TWO_SOURCES[edit.span.end:] == spliced


@pytest.mark.parametrize("generated", [
    "import os\n" + TWO_SOURCES,  # a changed prefix
    TWO_SOURCES + "\nprint('hi')\n",  # a changed suffix
    "",
])
def test_an_infill_that_moved_the_skeleton_is_refused_with_a_reason(generated):
    with pytest.raises(actions.InfillMismatch, match="prefix and suffix"):
        actions.solution_edit(parse(TWO_SOURCES), generated, infill=True, path=None, location="sibling")


def test_infill_of_a_file_without_a_todo_source_is_refused():
    with pytest.raises(actions.InfillMismatch, match="no longer has"):
        actions.solution_edit(parse(PROBLEM), PROBLEM, infill=True, path=None, location="sibling")


def test_generate_writes_a_new_linked_file_beside_the_problem(tmp_path):
    problem = tmp_path / "relu.py"
    (tmp_path / "relu_dice.py").write_text("taken")
    edit = actions.solution_edit(parse(PROBLEM), "class ModelNew: ...\n", infill=False, path=problem,
                                 location="sibling")
    assert edit == actions.NewFile(tmp_path / "relu_dice2.py", "# dice: reference = relu.py\nclass ModelNew: ...\n")


@pytest.mark.parametrize("path, location", [(None, "sibling"), ("relu.py", "sameFile")])
def test_same_file_or_unsaved_appends_at_the_end(tmp_path, path, location):
    edit = actions.solution_edit(parse(PROBLEM), "class ModelNew: ...\n", infill=False,
                                 path=tmp_path / path if path else None, location=location)
    assert isinstance(edit, actions.Replace)
    assert edit.span.start == edit.span.end == len(PROBLEM)
    assert edit.text == actions.GENERATED_MARK + "class ModelNew: ...\n"
