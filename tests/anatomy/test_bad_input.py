"""Bad input: anatomy returns what it can, never raises, and says in one line why something is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from dice_lsp.anatomy import parse

FILES = Path(__file__).parent / "files"


@pytest.mark.parametrize("text, note", [
    ("", "empty file"),
    ("   \n\n", "empty file"),
    ("\x00\x01ELF\x00", "binary file"),
    ("x" * (5 * 1024 * 1024 + 1), "larger than 5 MB"),
    ("import torch\nprint(torch.__version__)\n", "no `class Model` or `class ModelNew`"),
    ("class Model:\n    def forward(self, x):\n        return x\n", "no `get_inputs()`"),
])
def test_notes(text, note):
    anatomy = parse(text)
    assert any(note in n for n in anatomy.notes), anatomy.notes
    assert all("\n" not in n for n in anatomy.notes)


def test_mid_edit_file_keeps_what_parses():
    text = (FILES / "mid_edit_syntax_error.py").read_text()
    anatomy = parse(text)
    assert anatomy.syntax_errors
    assert any("unfinished statement" in note for note in anatomy.notes)
    # The open load_inline( call swallowed the rest of the file; the class after it is still read.
    assert anatomy.model_new is not None and anatomy.model_new.name_span.slice(text) == "ModelNew"


@pytest.mark.parametrize("cut", ["unclosed-call", "unclosed-string"])
def test_an_unfinished_statement_does_not_hide_the_classes_after_it(cut):
    text = (FILES / "honest_add_with_model.py").read_text()
    if cut == "unclosed-call":
        broken = text.replace('    extra_ldflags=[""],\n)', '    extra_ldflags=[""],\n', 1)
    else:
        broken = text.replace('    return out;\n}\n"""', '    return out;\n}\n', 1)
    assert broken != text
    anatomy = parse(broken)
    assert anatomy.model is not None and anatomy.model.name_span.slice(broken) == "Model"
    assert anatomy.model_new is not None and anatomy.get_inputs is not None
    assert anatomy.model_new.forward.slice(broken).startswith("def forward(self, a, b)")


def test_every_prefix_of_a_real_file_parses_without_raising():
    # What an editor sends while the user types: every cut of the file, at line granularity and inside tokens.
    text = (FILES / "honest_matmul_odd_strings.py").read_text()
    for cut in list(range(0, len(text), 97)) + [len(text)]:
        anatomy = parse(text[:cut])
        for split in anatomy.splits:
            assert split.prefix.slice(anatomy.text) + split.core.slice(anatomy.text) + \
                split.suffix.slice(anatomy.text) == anatomy.text


def test_f_string_sources_are_explained():
    text = ('import torch\nfrom torch.utils.cpp_extension import load_inline\nN = 4\n'
            'src = f"__global__ void k(float* x) {{ x[0] = {N}; }}"\n'
            'ext = load_inline(name="e", cpp_sources="", cuda_sources=src, functions=["k"])\n'
            'class ModelNew:\n    def forward(self, x):\n        return ext.k(x)\n')
    anatomy = parse(text)
    assert any("could not be followed" in note for note in anatomy.notes)
