"""One owner for which problem a solution belongs to and which CUDA source is the core (dice_lsp.anatomy.pairing)."""

from __future__ import annotations

import os
import threading

from dice_lsp.anatomy import core_split, find_reference, infill_split, parse
from dice_lsp.anatomy.pairing import MAX_REFERENCE_BYTES
from dice_lsp.engine import prompts

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(8)]


def get_init_inputs():
    return []
'''

# A skeleton whose first CUDA source is a real kernel and whose second is a TODO: Infill fills the second.
TWO_SOURCES = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

helper_source = """
__global__ void scale_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
"""

relu_source = """
// TODO: write the ReLU kernel and its launcher
"""

helper = load_inline(name="helper", cpp_sources="", cuda_sources=helper_source, functions=[])
relu = load_inline(name="relu", cpp_sources="torch::Tensor relu(torch::Tensor x);", cuda_sources=relu_source,
                   functions=["relu"])


class ModelNew(nn.Module):
    def forward(self, x):
        return relu.relu(x)
'''


def test_infill_fills_the_todo_source_not_the_first_one():
    anatomy = parse(TWO_SOURCES)
    assert len(anatomy.splits) == 2
    chosen = infill_split(anatomy)
    assert chosen is not None and chosen.source.variable == "relu_source"
    assert core_split(anatomy) == chosen
    # The engine's infill prompt asks for the same core the editor offered to fill.
    prefix, core, suffix = prompts.skeleton_parts(TWO_SOURCES)
    assert "TODO" in core and "scale_kernel" in prefix


def test_splice_replaces_only_the_todo_core():
    generated = TWO_SOURCES.replace("// TODO: write the ReLU kernel and its launcher",
                                    "__global__ void relu_kernel(const float* x, float* y, int n) {}")
    spliced = prompts.splice(TWO_SOURCES, generated)
    assert "relu_kernel" in spliced and "TODO" not in spliced
    assert spliced.count("scale_kernel") == 1


def test_a_file_with_model_is_its_own_reference(tmp_path):
    path = tmp_path / "problem.py"
    pairing = find_reference(parse(PROBLEM), path)
    assert pairing.text == PROBLEM and pairing.path == path and pairing.problem is None


def test_a_link_is_followed_relative_to_the_solution(tmp_path):
    (tmp_path / "problems").mkdir()
    (tmp_path / "problems" / "relu.py").write_text(PROBLEM)
    solution = "# dice: reference = problems/relu.py\n" + TWO_SOURCES
    pairing = find_reference(parse(solution), tmp_path / "relu_dice.py")
    assert pairing.text == PROBLEM and pairing.path == tmp_path / "problems" / "relu.py"


def test_no_reference_says_how_to_add_one(tmp_path):
    pairing = find_reference(parse(TWO_SOURCES), tmp_path / "x.py")
    assert pairing.text is None and "# dice: reference = " in pairing.problem


def test_a_link_to_a_device_or_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    results = []
    for target in ("/dev/zero", "/dev/stdin", str(fifo)):
        solution = f"# dice: reference = {target}\n" + TWO_SOURCES
        reader = threading.Thread(target=lambda: results.append(find_reference(parse(solution), tmp_path / "s.py")))
        reader.start()
        reader.join(timeout=60)  # a blocking read would never return; the assertion below names it
        assert not reader.is_alive(), f"reading a link to {target} blocked"
    assert [r.text for r in results] == [None, None, None]
    assert all("cannot be read" in r.problem for r in results)


def test_a_link_to_a_huge_file_is_refused(tmp_path):
    big = tmp_path / "big.py"
    big.write_text("#" * (MAX_REFERENCE_BYTES + 1))
    pairing = find_reference(parse("# dice: reference = big.py\n" + TWO_SOURCES), tmp_path / "s.py")
    assert pairing.text is None and "at most" in pairing.problem
