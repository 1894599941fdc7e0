"""Where a generated solution goes (the core of the TODO source for Infill, a linked new file or the file's end),
and the mechanical fixes of findings."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from dice_lsp import actions
from dice_lsp.anatomy import Span, parse
from dice_lsp.engine import prompts

FILES = Path(__file__).parent / "files"
ANATOMY_FILES = Path(__file__).parent.parent / "anatomy" / "files"
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


REFERENCE = "import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
PRECISION = ('import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\ntorch.set_float32_matmul_precision("high")\n'
             "\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x.half().to(torch.bfloat16) * 2\n")


def applied(text: str, fixes) -> str:
    for fix in sorted(fixes, key=lambda fix: fix.span.start, reverse=True):
        text = text[:fix.span.start] + fix.text + text[fix.span.end:]
    return text


def test_precision_switches_are_fixed_back_to_float32_and_the_fixed_file_has_no_precision_finding():
    anatomy = parse(PRECISION, REFERENCE)
    fixes = actions.fixes(anatomy)
    assert [fix.title for fix in fixes] == ["Turn TF32 off", "Keep matmuls in full float32 precision",
                                            "Stay in float32", "Use torch.float32"]
    fixed = applied(PRECISION, fixes)
    assert "allow_tf32 = False" in fixed and 'set_float32_matmul_precision("highest")' in fixed
    assert "return x.to(torch.float32) * 2" in fixed
    assert [f.code for f in parse(fixed, REFERENCE).findings if f.code == "precision"] == []
    tf32 = anatomy.text.index("allow_tf32")
    assert [fix.title for fix in actions.fixes(anatomy, Span(tf32, tf32))] == ["Turn TF32 off"]  # at the cursor


def test_an_exception_fallback_is_replaced_by_its_try_block():
    text = (ANATOMY_FILES / "deceptive_fallbacks.py").read_text()
    fixes = [fix for fix in actions.fixes(parse(text)) if fix.finding.code == "exception-fallback"]
    assert len(fixes) == 2  # around the build, and in forward
    fixed = applied(text, fixes)
    assert "try:" not in fixed and "except" not in fixed
    assert "        return self.ext.gelu_cuda(x)\n" in fixed and "return super().forward(x)" not in fixed
    assert '\ngelu_ext = load_inline(name="gelu_ext", cpp_sources=' in fixed
    assert "exception-fallback" not in {f.code for f in parse(fixed).findings}
    ast.parse(fixed)  # still Python


def test_a_try_with_finally_or_else_has_no_mechanical_fix():
    text = (ANATOMY_FILES / "deceptive_fallbacks.py").read_text().replace(
        "        except Exception:\n            return super().forward(x)\n",
        "        except Exception:\n            return super().forward(x)\n        finally:\n            pass\n")
    anatomy = parse(text)
    assert len([f for f in anatomy.findings if f.code == "exception-fallback"]) == 2
    assert len([fix for fix in actions.fixes(anatomy) if fix.finding.code == "exception-fallback"]) == 1


def test_generated_code_is_unusable_without_modelnew_or_with_a_kernel_python_never_reaches():
    assert actions.unusable(parse("import torch\nclassclass elementwise\n")) == (
        "a syntax error at line 2", "no `class ModelNew`")
    never_bound = actions.unusable(parse((ANATOMY_FILES / "deceptive_never_bound.py").read_text()))
    assert [reason.split(" at line ")[0] for reason in never_bound] == ["kernel-not-bound", "torch-fallback"]
    assert actions.unusable(parse((ANATOMY_FILES / "honest_add_with_model.py").read_text())) == ()
