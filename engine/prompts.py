'''What DICE is asked: an end-to-end and an infilling prompt (ours, `BUILT_IN`, or a checkpoint's own template:
engine/templates.py), rendered through the checkpoint's chat template; and what is taken back: the first code block,
spliced into the user's skeleton.'''

from __future__ import annotations

import json
import re

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from dice_lsp.anatomy import Anatomy, Split, core_split, parse
from dice_lsp.engine.errors import EngineError
from dice_lsp.engine.templates import PromptTemplate

EXAMPLE_REFERENCE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a, b):
        return a + b


def get_inputs():
    return [torch.randn(1, 128), torch.randn(1, 128)]


def get_init_inputs():
    return []
"""

EXAMPLE_SOLUTION = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# CUDA source: the kernel and the host function that launches it
elementwise_add_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void elementwise_add_kernel(const float* a, const float* b, float* out, int size) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {
        out[idx] = a[idx] + b[idx];
    }
}

torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b) {
    int size = a.numel();
    auto out = torch::empty_like(a);
    const int threads = 256;
    const int blocks = (size + threads - 1) / threads;
    elementwise_add_kernel<<<blocks, threads>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), size);
    return out;
}
"""

elementwise_add_cpp_source = "torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b);"

# Build the extension when the module is imported
elementwise_add = load_inline(
    name="elementwise_add",
    cpp_sources=elementwise_add_cpp_source,
    cuda_sources=elementwise_add_source,
    functions=["elementwise_add_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.elementwise_add = elementwise_add

    def forward(self, a, b):
        return self.elementwise_add.elementwise_add_cuda(a, b)
'''

SYSTEM = "You are a helpful assistant."

TASK = (
    "Your job is to speed up a PyTorch architecture by writing custom CUDA kernels for some of its operators.\n\n"
    "Which operators you replace is up to you: you may keep some as they are, replace several, fuse neighbouring "
    "operators into one kernel (a matmul followed by a relu, say) or change the algorithm (an online softmax, "
    "for instance).\n"
)


# The answer's first lines in every solution the bundled model was trained on (dice_lsp/train/tasks writes them):
# given to the model rather than written by it, since a small model garbles them on an unfamiliar prompt
# (benchmarks/RESULTS.md, "decode validity").
SOLUTION_HEADER = "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n"

BUILT_IN = PromptTemplate(
    system=SYSTEM,
    end_to_end=(
        f"{TASK}\n"
        "This example shows how CUDA code is compiled and bound inline with torch. The example architecture:\n\n"
        f"```python\n{EXAMPLE_REFERENCE}```\n\n"
        f"The same architecture with a custom CUDA kernel:\n\n```python\n{EXAMPLE_SOLUTION}```\n\n"
        "Now the architecture to optimize:\n\n```python\n{reference}\n```\n\n"
        "Rewrite the architecture named Model with custom CUDA operators and call the result ModelNew, with the same "
        "constructor and forward arguments. Reply with the complete ModelNew code in one ```python codeblock: real "
        "code that compiles and runs, not pseudocode, and no testing code.\n"
    ),
    infill=(
        f"{TASK}\n"
        "The architecture to optimize:\n\n```python\n{reference}\n```\n\n"
        "Part of an optimized architecture ModelNew is written already. It begins with:\n\n"
        "```python\n{prefix}\n```\n\n"
        "and it ends with:\n\n"
        "```python\n{suffix}\n```\n\n"
        "Write the missing middle part: the CUDA source string with the kernels and the host functions that the "
        "rest of the code declares and calls. Reply with the complete ModelNew code, beginning and end unchanged, in "
        "one ```python codeblock: real code that compiles and runs, not pseudocode, and no testing code.\n"
    ),
    answer_prefix="```python\n" + SOLUTION_HEADER,
)


def end_to_end_prompt(reference: str, template: PromptTemplate = BUILT_IN) -> list[dict[str, str]]:
    """KernelBench's one-shot prompt (ours: instructions, the elementwise-add example pair, then the user's Model),
    or `template`'s."""
    return template.end_to_end_messages(reference.rstrip())


def infill_prompt(reference: str, prefix: str, suffix: str, template: PromptTemplate = BUILT_IN
                  ) -> list[dict[str, str]]:
    """DICE's infilling prompt: the reference, and the solution with its CUDA source left out; the model writes
    the whole solution file again with the source filled in."""
    return template.infill_messages(reference.rstrip(), prefix.rstrip(), suffix.strip())


def render(messages: list[dict[str, str]], chat_template: str | None) -> str:
    """The prompt text for `messages`, ending where the assistant starts writing.

    Uses the checkpoint's Jinja chat template when it has one (rendered in a sandbox, as HF does), else Qwen3's
    layout written out: <|im_start|>role\\ncontent<|im_end|>\\n per message, then <|im_start|>assistant\\n.
    """
    if not chat_template:
        turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return turns + "<|im_start|>assistant\n"

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                extensions=["jinja2.ext.loopcontrols"])
    environment.filters["tojson"] = _tojson
    environment.globals["raise_exception"] = raise_exception
    try:
        return environment.from_string(chat_template).render(messages=messages, add_generation_prompt=True,
                                                             tools=None, enable_thinking=False)
    except jinja2.exceptions.TemplateError as error:
        raise EngineError(f"the checkpoint's chat template failed to render: {error}") from None


def _tojson(value, indent=None, **_):
    return json.dumps(value, ensure_ascii=False, indent=indent)


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[ \t]*\n(.*?)(?:\n[ \t]*```|\Z)", re.DOTALL)


def extract_code(text: str) -> str | None:
    """The first fenced code block (```python preferred over an untagged one; an unclosed block runs to the end),
    or None when there is none."""
    text = re.sub(r"<think>.*?</think>", "", text, flags=re.DOTALL)
    blocks = [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(text)]
    for wanted in (("python", "py"), ("",)):
        for language, body in blocks:
            if language in wanted and body.strip():
                return body.rstrip() + "\n"
    return None


def splice(skeleton: str, generated: str) -> str:
    """The skeleton with its core (the CUDA source assignment) replaced by the generated file's core; the
    skeleton's prefix and suffix are kept byte for byte. Raises EngineError when either side has no core."""
    target = _split(parse(skeleton), "skeleton")
    source = parse(generated)
    if not source.splits:
        raise EngineError("the generated code has no CUDA source assignment to take as the new core")
    chosen = next((s for s in source.splits if s.source.variable == target.source.variable), source.splits[0])
    return target.prefix.slice(skeleton) + chosen.core.slice(generated) + target.suffix.slice(skeleton)


def skeleton_parts(skeleton: str) -> tuple[str, str, str]:
    """(prefix, core, suffix) of a solution skeleton, by the anatomy's DICE split."""
    split = _split(parse(skeleton), "skeleton")
    return split.prefix.slice(skeleton), split.core.slice(skeleton), split.suffix.slice(skeleton)


def _split(anatomy: Anatomy, what: str) -> Split:
    """The skeleton's core, by the rule the editor's *Infill* offer uses (`anatomy.core_split`)."""
    split = core_split(anatomy)
    if split is None:
        notes = "; ".join(anatomy.notes)
        raise EngineError(
            f"the {what} has no CUDA source string assigned to a variable and passed to load_inline(cuda_sources=...), "
            f"so there is no core to fill in" + (f" ({notes})" if notes else "")
        )
    return split
