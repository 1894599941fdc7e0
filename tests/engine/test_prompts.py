"""Prompts through the chat template, code-block extraction and infill splicing (prefix and suffix byte for byte)."""

from __future__ import annotations

import pytest

from dice_lsp.engine import prompts
from dice_lsp.engine.errors import EngineError
from dice_lsp.engine.tokenizer import Tokenizer

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(16, 16)]


def get_init_inputs():
    return []
'''

SKELETON = '''import torch  # keep: two spaces before this comment
from torch.utils.cpp_extension import load_inline

relu_source = """
// the old kernel
"""

relu_cpp = "torch::Tensor relu_cuda(torch::Tensor x);"
relu = load_inline(name="relu", cpp_sources=relu_cpp, cuda_sources=relu_source, functions=["relu_cuda"])


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return relu.relu_cuda(x)\t
'''

GENERATED = '''import torch
from torch.utils.cpp_extension import load_inline

relu_source = r"""
__global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.f);
}
torch::Tensor relu_cuda(torch::Tensor x) { return x; }
"""

relu_cpp = "different declarations the splice must ignore"
relu = load_inline(name="relu", cpp_sources=relu_cpp, cuda_sources=relu_source, functions=["relu_cuda"])


class ModelNew(torch.nn.Module):
    pass
'''


def test_end_to_end_prompt_holds_the_one_shot_example_and_the_problem():
    text = prompts.render(prompts.end_to_end_prompt(PROBLEM), None)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert "elementwise_add_kernel" in text and "class ModelNew" in text
    assert text.index("elementwise_add_kernel") < text.index("torch.relu(x)")
    assert "```python" in text


def test_chat_template_of_the_checkpoint_is_used(tiny_model_dir):
    template = Tokenizer.from_dir(tiny_model_dir).chat_template
    messages = prompts.end_to_end_prompt(PROBLEM)
    assert prompts.render(messages, template) == prompts.render(messages, None)
    custom = "{% for m in messages %}[{{ m['role'] }}]{% endfor %}{% if add_generation_prompt %}>{% endif %}"
    assert prompts.render(messages, custom) == "[system][user]>"
    with pytest.raises(EngineError, match="chat template"):
        prompts.render(messages, "{{ raise_exception('no system role') }}")


def test_infill_prompt_shows_prefix_and_suffix_not_the_core():
    prefix, core, suffix = prompts.skeleton_parts(SKELETON)
    assert prefix + core + suffix == SKELETON
    text = prompts.render(prompts.infill_prompt(PROBLEM, prefix, suffix), None)
    assert "// the old kernel" not in text
    assert "import torch  # keep" in text and "relu.relu_cuda(x)" in text and "torch.relu(x)" in text


def test_extract_first_python_block():
    reply = "Here:\n```\nnot this\n```\n```python\nfirst = 1\n```\n```python\nsecond = 2\n```"
    assert prompts.extract_code(reply) == "first = 1\n"
    assert prompts.extract_code("```\nplain = 1\n```") == "plain = 1\n"
    assert prompts.extract_code("```python\nunclosed = 1\n") == "unclosed = 1\n"
    assert prompts.extract_code("<think>```python\nno = 1\n```</think>no code here") is None


def test_splice_keeps_prefix_and_suffix_byte_for_byte():
    spliced = prompts.splice(SKELETON, GENERATED)
    prefix, core, suffix = prompts.skeleton_parts(SKELETON)
    assert spliced.startswith(prefix) and spliced.endswith(suffix)
    assert "relu_kernel" in spliced and "// the old kernel" not in spliced
    assert "different declarations" not in spliced and spliced.endswith("relu.relu_cuda(x)\t\n")


def test_splice_errors_name_what_is_missing():
    with pytest.raises(EngineError, match="generated code has no CUDA source"):
        prompts.splice(SKELETON, "import torch\n")
    with pytest.raises(EngineError, match="skeleton has no CUDA source"):
        prompts.splice(PROBLEM, GENERATED)
