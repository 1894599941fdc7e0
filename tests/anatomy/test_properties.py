"""Properties on generated files: the split is exact, literals evaluate as Python does, offsets map back."""

from __future__ import annotations

import ast

from hypothesis import given, settings
from hypothesis import strategies as st

from dice_lsp.anatomy import LineIndex, parse
from dice_lsp.anatomy.literals import evaluate_literal

_chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\r")
_text = st.text(_chars, max_size=40)


def _python_literal(value: str, style: int) -> str:
    if style == 0:
        return repr(value)
    if style == 1:
        body = value.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
        if body.endswith('"'):
            body = body[:-1] + '\\"'
        return '"""' + body + '"""'
    escaped = "".join(f"\\u{ord(c):04x}" if ord(c) < 0x10000 and not c.isalnum() else c for c in value)
    return '"' + escaped.replace("\n", "\\n") + '"'


@settings(max_examples=300, deadline=None)
@given(_text, st.integers(0, 2))
def test_literal_values_equal_pythons(value, style):
    literal = _python_literal(value, style)
    result = evaluate_literal(literal, 0, len(literal))
    assert result is not None
    assert result.value == ast.literal_eval(literal)


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters='\x00\r\\"'), max_size=30))
def test_raw_literal_characters_map_to_themselves(value):
    literal = 'r"""' + value + ' """'
    result = evaluate_literal(literal, 0, len(literal))
    for i, char in enumerate(result.value):
        assert literal[_offset(result, i)] == char


def _offset(result, value_offset):
    from dice_lsp.anatomy.types import SourceString, Span
    source = SourceString(None, "cuda", result.value, Span(0, 0), Span(0, 0), result.pieces)
    return source.text_offset(value_offset)


_names = st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True)


@settings(max_examples=60, deadline=None)
@given(_names, _names, st.lists(_names, min_size=1, max_size=3, unique=True), _text.map(lambda s: s.replace("\n", " ")),
       st.integers(0, 2), st.booleans())
def test_generated_solution_files_split_exactly(var, ext, kernels, comment, style, raw):
    var, ext = f"src_{var}", f"ext_{ext}"
    body = "\n".join(f"__global__ void {k}_kernel(float* x) {{ x[0] = 1.f; }}" for k in kernels)
    body += "\ntorch::Tensor run(torch::Tensor x) {\n" + "".join(
        f"    {k}_kernel<<<1, 1>>>(x.data_ptr<float>());\n" for k in kernels) + "    return x;\n}\n"
    literal = ('r"""' + body + '"""') if raw else _python_literal(body, style)
    text = (f"# {comment}\nimport torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n\n"
            f"{var} = {literal}\n\n{ext} = load_inline(name='x', cpp_sources='torch::Tensor run(torch::Tensor x);', "
            f"cuda_sources={var}, functions=['run'])\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
            f"        return {ext}.run(x)\n")
    anatomy = parse(text)
    [split] = anatomy.splits
    assert split.prefix.slice(text) + split.core.slice(text) + split.suffix.slice(text) == text
    assert split.core.slice(text) == f"{var} = {literal}"
    assert [k.name for k in anatomy.kernels] == [f"{k}_kernel" for k in kernels]
    for kernel in anatomy.kernels:
        # The name's span covers exactly the characters that produce it (escapes included).
        assert ast.literal_eval('"' + kernel.name_span.slice(text) + '"') == kernel.name
    assert [f.code for f in anatomy.findings if f.severity == "warning"] == []


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r"), max_size=60))
def test_line_index_round_trips_in_every_encoding(text):
    index = LineIndex(text)
    for encoding in ("utf-8", "utf-16", "utf-32"):
        for offset in range(len(text) + 1):
            line, column = index.position(offset, encoding)
            assert index.offset(line, column, encoding) == offset
    if text:
        line, column = index.position(len(text), "utf-16")
        expected = len(text.split("\n")[-1].encode("utf-16-le")) // 2
        assert (line, column) == (text.count("\n"), expected)
