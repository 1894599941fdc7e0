"""Coding styles of a generated solution (names, block size, comments, input handling) and the two files around it:
the reference (Model, get_inputs, get_init_inputs) and the solution (CUDA source, load_inline, ModelNew).

Templates write CUDA with ${...} placeholders (braces stay plain C++); `Style.fill` puts the names in.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass
from string import Template


def camel(stem: str) -> str:
    head, *rest = stem.split("_")
    return head + "".join(part.capitalize() for part in rest)


@dataclass(frozen=True)
class Style:
    """The choices that change how a solution reads, never what it computes."""

    stem: str  # what the kernel does, in snake case: "gelu_tanh", "row_softmax"
    naming: int  # 0..3: which naming scheme for kernels, host functions and Python variables
    block: int  # threads per block where the template lets it vary
    comments: bool
    contiguity: str  # "check": TORCH_CHECK in C++; "host": .contiguous() in C++; "python": .contiguous() in forward
    launch_check: str  # "c10": C10_CUDA_KERNEL_LAUNCH_CHECK; "cuda": cudaGetLastError + TORCH_CHECK
    restrict: bool  # `__restrict__` on kernel pointers
    bind_self: bool  # ModelNew keeps the extension as an attribute
    index: str  # "int" or "int64_t" for element indices

    def kernel(self, word: str = "") -> str:
        stem = f"{self.stem}_{word}" if word else self.stem
        return (f"{stem}_kernel", f"{camel(stem)}Kernel", f"k_{stem}", f"{stem}_fwd_kernel")[self.naming]

    @property
    def host(self) -> str:
        return (f"{self.stem}_cuda", f"{self.stem}_forward", f"launch_{self.stem}", f"run_{self.stem}")[self.naming]

    @property
    def source_var(self) -> str:
        return (f"{self.stem}_source", "cuda_source", f"{self.stem}_cuda_src", "kernel_code")[self.naming]

    @property
    def cpp_var(self) -> str:
        return (f"{self.stem}_cpp_source", "cpp_source", f"{self.stem}_decl", "cpp_decl")[self.naming]

    @property
    def ext_var(self) -> str:
        return (f"{self.stem}_ext", f"{self.stem}_module", "custom_ops", f"_{self.stem}")[self.naming]

    @property
    def ptr(self) -> str:
        return " __restrict__" if self.restrict else ""

    def includes(self, *more: str) -> str:
        lines = ["#include <torch/extension.h>", "#include <c10/cuda/CUDAStream.h>"]
        if self.launch_check == "c10":
            lines.append("#include <c10/cuda/CUDAException.h>")
        lines += [f"#include <{name}>" for name in more]
        return "\n".join(lines)

    def inputs(self, *names: str) -> str:
        """The host function's first lines: check (or make) each tensor a contiguous fp32 CUDA tensor."""
        lines = []
        for name in names:
            if self.contiguity == "host":
                lines.append(f"    {name} = {name}.contiguous();")
            lines.append(f'    TORCH_CHECK({name}.is_cuda(), "{name} must be a CUDA tensor");')
            if self.contiguity != "host":
                lines.append(f'    TORCH_CHECK({name}.is_contiguous(), "{name} must be contiguous");')
            lines.append(f'    TORCH_CHECK({name}.scalar_type() == torch::kFloat32, "{name} must be float32");')
        return "\n".join(lines)

    def stream(self) -> str:
        if self.naming % 2:
            return "    auto stream = at::cuda::getCurrentCUDAStream();"
        return "    cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();"

    def checked(self) -> str:
        if self.launch_check == "c10":
            return "    C10_CUDA_KERNEL_LAUNCH_CHECK();"
        return ("    cudaError_t err = cudaGetLastError();\n"
                '    TORCH_CHECK(err == cudaSuccess, "kernel launch failed: ", cudaGetErrorString(err));')

    def arg(self, name: str) -> str:
        """How forward passes a tensor to the host function."""
        return f"{name}.contiguous()" if self.contiguity == "python" else name

    def fill(self, text: str, **names: object) -> str:
        """Substitute ${...} names (the style's and the template's) and drop `//` comments if the style has none."""
        values = {"ptr": self.ptr, "idx": self.index, "block": self.block, "host": self.host,
                  "inputs": "", "stream": self.stream(), "checked": self.checked(), **names}
        text = Template(text).substitute(values)
        if not self.comments:
            text = "\n".join(line for line in text.split("\n") if not line.lstrip().startswith("//"))
        return re.sub(r"\n{3,}", "\n\n", text)


def sample_style(rng: random.Random, stem: str, blocks: tuple[int, ...] = (128, 256, 512)) -> Style:
    return Style(stem=stem, naming=rng.randrange(4), block=rng.choice(blocks), comments=rng.random() < 0.5,
                 contiguity=rng.choice(("check", "host", "python")), launch_check=rng.choice(("c10", "cuda")),
                 restrict=rng.random() < 0.5, bind_self=rng.random() < 0.5, index=rng.choice(("int", "int64_t")))


def _indent(lines: str, spaces: int) -> str:
    pad = " " * spaces
    return "\n".join(pad + line if line.strip() else "" for line in lines.strip("\n").split("\n"))


def reference_file(*, init_params: str, init_body: str, forward_params: str, forward_body: str, constants: str,
                   inputs: str, init_inputs: str, functional: bool = False, doc: str = "") -> str:
    """A KernelBench problem: Model, module-level sizes, get_inputs (CPU tensors) and get_init_inputs."""
    head = "import torch\nimport torch.nn as nn\n" + ("import torch.nn.functional as F\n" if functional else "")
    docstring = f'    """{doc}"""\n\n' if doc else ""
    init_signature = f"self, {init_params}" if init_params else "self"
    body = _indent(init_body, 8) + "\n" if init_body.strip() else ""
    return (f"{head}\n\nclass Model(nn.Module):\n{docstring}"
            f"    def __init__({init_signature}):\n        super().__init__()\n{body}\n"
            f"    def forward(self, {forward_params}):\n{_indent(forward_body, 8)}\n\n\n"
            f"{constants.strip()}\n\n\n"
            f"def get_inputs():\n    return [{inputs}]\n\n\n"
            f"def get_init_inputs():\n    return [{init_inputs}]\n")


def solution_file(style: Style, *, cuda: str, declaration: str, init_params: str, init_body: str,
                  forward_params: str, call_args: str, doc: str = "") -> str:
    """A KernelBench solution: imports, the CUDA source string (the DICE core), its declaration, load_inline and
    ModelNew, whose forward calls the one bound host function with `call_args`."""
    digest = hashlib.sha256(cuda.encode()).hexdigest()[:8]
    name = f"{style.stem}_{digest}"
    comment = "# Custom CUDA kernels, compiled inline when the module is imported\n" if style.comments else ""
    receiver = f"self.{'ops' if style.naming % 2 else 'kernels'}" if style.bind_self else style.ext_var
    init_lines = [line for line in init_body.strip("\n").split("\n") if line.strip()]
    if style.bind_self:
        init_lines.append(f"{receiver} = {style.ext_var}")
    init_signature = f"self, {init_params}" if init_params else "self"
    docstring = f'    """{doc}"""\n\n' if doc and style.comments else ""
    body = _indent("\n".join(init_lines), 8) + "\n" if init_lines else ""
    return ("import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n\n"
            f"{comment}{style.source_var} = \"\"\"\n{cuda.strip()}\n\"\"\"\n\n"
            f"{style.cpp_var} = \"{declaration}\"\n\n"
            f"{style.ext_var} = load_inline(\n"
            f"    name=\"{name}\",\n"
            f"    cpp_sources={style.cpp_var},\n"
            f"    cuda_sources={style.source_var},\n"
            f"    functions=[\"{style.host}\"],\n"
            f"    verbose=False,\n"
            ")\n\n\n"
            f"class ModelNew(nn.Module):\n{docstring}"
            f"    def __init__({init_signature}):\n        super().__init__()\n{body}\n"
            f"    def forward(self, {forward_params}):\n"
            f"        return {receiver}.{style.host}({call_args})\n")
