"""Compiler output lands on the right line of the Python file, through load_inline's implicit include lines."""

from dice_lsp.anatomy import parse as parse_anatomy
from dice_lsp.anatomy.positions import LineIndex
from dice_lsp.harness.build import CUDA_CU_HEADER, MAIN_CPP_HEADER, layout
from dice_lsp.harness.diagnostics import parse, place



def test_parses_gcc_and_nvcc_lines(files):
    output = (
        "/b/main.cpp:7:12: error: 'undeclared_name' was not declared in this scope\n"
        "/b/cuda.cu(12): warning #177-D: variable \"x\" was declared but never referenced\n"
        "      int x = 0;\n"
        "          ^\n"
    )
    raws = parse(output)
    assert [(r.file, r.line, r.column, r.severity) for r in raws] == [
        ("/b/main.cpp", 7, 12, "error"), ("/b/cuda.cu", 12, 11, "warning")]


def test_error_maps_back_into_the_source_string(files):
    solution = files.text("compile_error_solution.py")
    anatomy = parse_anatomy(solution)
    source = anatomy.sources[0].value
    layouts = [layout([source], [], MAIN_CPP_HEADER, CUDA_CU_HEADER)]
    line_in_value = source.split("\n").index("    return undeclared_name;") + 1
    generated_line = line_in_value + len(MAIN_CPP_HEADER)
    raws = parse(f"/b/main.cpp:{generated_line}:12: error: 'undeclared_name' was not declared in this scope\n")
    [diagnostic] = place(raws, layouts, anatomy, solution)
    index = LineIndex(solution)
    assert index.line_text(diagnostic.line).strip() == "return undeclared_name;"
    assert diagnostic.span.slice(solution) == "undeclared_name"


def test_unplaceable_error_lands_on_the_load_inline_call(files):
    solution = files.text("compile_error_solution.py")
    anatomy = parse_anatomy(solution)
    [diagnostic] = place(parse("/usr/include/x.h:3:1: error: bad\n"), [], anatomy, solution)
    assert "load_inline" in LineIndex(solution).line_text(diagnostic.line)
    assert diagnostic.message.startswith("x.h:3:")


def test_cuda_source_lines_are_offset_by_three_header_lines(files):
    solution = files.text("cuda_solution.py")
    anatomy = parse_anatomy(solution)
    cuda = anatomy.cuda_sources[0].value
    cpp = [s.value for s in anatomy.sources if s.role == "cpp"]
    generated = layout(cpp, [cuda], MAIN_CPP_HEADER, CUDA_CU_HEADER)
    line_in_value = next(i for i, line in enumerate(cuda.split("\n"), 1) if "out[i] = a[i] + b[i];" in line)
    raws = parse(f"/b/cuda.cu({line_in_value + 3}): error: something\n        out[i] = a[i] + b[i];\n        ^\n")
    [diagnostic] = place(raws, [generated], anatomy, solution)
    assert "out[i] = a[i] + b[i];" in LineIndex(solution).line_text(diagnostic.line)
