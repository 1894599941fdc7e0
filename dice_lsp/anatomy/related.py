"""The second places a finding points at (`Related`), each read from the file: where a kernel is launched, which host
functions an extension binds, which `load_inline` compiles a source, where `class Model` says what the problem is.

Static checks (findings.py), the harness's run-time findings and the server's compile errors all ask here.
"""

from __future__ import annotations

from dice_lsp.anatomy.cuda import launch_sites
from dice_lsp.anatomy.types import Anatomy, CudaFunction, Extension, Related, SourceString, Span


def launches_of(anatomy: Anatomy, kernel: str, message: str) -> tuple[Related, ...]:
    """Each `kernel<<<...>>>` launch in the file's sources, from the kernel's name to the chevrons."""
    return tuple(Related(Span(source.text_offset(start), source.text_offset(end - 1) + 1), message)
                 for source in anatomy.sources for start, end in launch_sites(source.value, kernel))


def kernels_of(extension: Extension, message: str) -> tuple[Related, ...]:
    """The name of each `__global__` kernel the extension compiles; `message` may name it as {name}."""
    return tuple(Related(kernel.name_span, message.format(name=kernel.name))
                 for kernel in _functions(extension) if kernel.kind == "global")


def hosts_of(extension: Extension, names: set[str] | tuple[str, ...], message: str) -> tuple[Related, ...]:
    """The name of each host function among `names` that the extension's sources define; `message` may name it."""
    return tuple(Related(function.name_span, message.format(name=function.name))
                 for function in _functions(extension) if function.kind != "global" and function.name in names)


def extension_with(anatomy: Anatomy, kernel: CudaFunction) -> Extension | None:
    """The extension that compiles `kernel`."""
    return next((extension for extension in anatomy.extensions if kernel in _functions(extension)), None)


def compiled_by(anatomy: Anatomy, span: Span) -> Related | None:
    """The `load_inline` call that compiles the source string holding `span` (a compiler's error inside it)."""
    for extension in anatomy.extensions:
        source = next((s for s in extension.sources if _inside(s, span)), None)
        if source is not None:
            name = f"`{source.variable}`" if source.variable else "this source"
            return Related(extension.call, f"{name} is compiled by this load_inline")
    return None


def compiled_calls(anatomy: Anatomy, message: str) -> tuple[Related, ...]:
    """ModelNew's forward's calls of a function an extension binds (`self.ext.add_cuda(a, b)`); `message` may name
    the function."""
    bound = {name for extension in anatomy.extensions for name in extension.functions}
    calls = anatomy.model_new.forward_calls if anatomy.model_new is not None else ()
    return tuple(Related(call.span, message.format(name=call.callee.rpartition(".")[2])) for call in calls
                 if "." in call.callee and call.callee.rpartition(".")[2] in bound)


def model_part(reference: Anatomy, anatomy: Anatomy, part: str, message: str) -> tuple[Related, ...]:
    """A part of the reference's `class Model` ("class", "forward", "__init__"); `in_reference` when the reference
    is another file than `anatomy`'s. None where Model has no such part."""
    model = reference.model
    if model is None:
        return ()
    span = {"class": model.name_span, "forward": model.forward, "__init__": model.init}[part]
    return () if span is None else (Related(span, message, in_reference=reference is not anatomy),)


def _functions(extension: Extension) -> tuple[CudaFunction, ...]:
    return tuple(function for source in extension.sources for function in source.functions)


def _inside(source: SourceString, span: Span) -> bool:
    return source.literal.start <= span.start and span.end <= source.literal.end
