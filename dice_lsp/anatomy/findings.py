"""Static deception checks on ModelNew: kernels that are compiled but do not do the work, and reward hacks.

Each finding has a stable code; the harness's run-time checks reuse the same codes for the same faults.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tree_sitter import Node

from dice_lsp.anatomy import related
from dice_lsp.anatomy.cuda import launches
from dice_lsp.anatomy.reader import FileReader, Reading, definition_of, descendants_of, methods_of, module_statements
from dice_lsp.anatomy.types import Anatomy, ClassInfo, Extension, Finding, Related, Span

# Codes, documented once here (README lists them too).
KERNEL_NOT_BOUND = "kernel-not-bound"  # compiled, but nothing lets Python reach it
BINDING_NOT_CALLED = "binding-not-called"  # bound, but forward never calls it
TORCH_FALLBACK = "torch-fallback"  # forward computes the work with PyTorch
ONE_SHOT_COPY = "one-shot-copy"  # the prompt's elementwise-add example, for a problem that is not an add
EXCEPTION_FALLBACK = "exception-fallback"  # try/except that can fall back to PyTorch
REFERENCE_REUSE = "reference-reuse"  # inherits Model or calls the reference
SIDE_STREAM = "side-stream"  # work on another CUDA stream escapes the timer
THREAD = "thread"  # work on another thread or process escapes the timer
TIMER_PATCH = "timer-patch"  # patches torch, time or the timer
PRECISION = "precision"  # lower precision or TF32 against an fp32 reference
OUTPUT_CACHED = "output-cached"  # results keyed by input identity
SIGNATURE_MISMATCH = "signature-mismatch"  # ModelNew's __init__/forward differ from Model's
# Run-time only (the harness finds them; no text shows them for sure)
LAZY_OUTPUT = "lazy-output"  # forward returns a tensor subclass or other deferred value, not plain tensors
TIMED_MISMATCH = "timed-mismatch"  # a timed call's outputs differ from the reference's on its (fresh) inputs
PROFILED_DIFFERENTLY = "profiled-differently"  # forward takes far longer profiled (or after) than timed
INPUT_MUTATION = "input-mutation"  # forward writes into inputs the reference leaves alone
TIMING_UNSTABLE = "timing-unstable"  # a side's timing rounds disagree: the machine was busy, not a deception

# PyTorch calls that compute (rather than allocate or reshape), by family; the family names what a kernel that
# does the same job would be called.
_FAMILIES = {
    "matmul": ("matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "linear", "einsum", "tensordot", "dot", "mv",
               "outer", "chain_matmul", "bilinear"),
    "conv": ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "conv"),
    "softmax": ("softmax", "log_softmax", "softmin"),
    "norm": ("layer_norm", "batch_norm", "group_norm", "instance_norm", "rms_norm", "normalize", "norm",
             "local_response_norm"),
    "pool": ("max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
             "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool2d"),
    "reduce": ("sum", "mean", "prod", "amax", "amin", "max", "min", "argmax", "argmin", "var", "std", "logsumexp",
               "cumsum", "cumprod", "all", "any"),
    "activation": ("relu", "relu6", "leaky_relu", "gelu", "silu", "elu", "selu", "celu", "mish", "sigmoid", "tanh",
                   "hardtanh", "hardswish", "hardsigmoid", "softplus", "softsign", "tanhshrink", "threshold",
                   "logsigmoid", "glu"),
    "elementwise": ("add", "sub", "mul", "div", "pow", "exp", "log", "sqrt", "rsqrt", "abs", "clamp", "clip",
                    "where", "maximum", "minimum", "neg", "reciprocal", "sign", "square", "erf"),
    "loss": ("cross_entropy", "mse_loss", "l1_loss", "smooth_l1_loss", "kl_div", "nll_loss", "huber_loss",
             "cosine_similarity", "triplet_margin_loss", "hinge_embedding_loss", "binary_cross_entropy"),
    "attention": ("scaled_dot_product_attention", "multi_head_attention_forward"),
}
_OP_FAMILY = {op: family for family, ops in _FAMILIES.items() for op in ops}
# Words in a kernel's name that say which family it implements.
_FAMILY_WORDS = {
    "matmul": ("matmul", "gemm", "mm", "bmm", "gemv", "linear", "dense", "dot", "fc"),
    "conv": ("conv", "convolution"),
    "softmax": ("softmax",),
    "norm": ("norm", "layernorm", "batchnorm", "groupnorm", "rmsnorm", "instancenorm", "normalize"),
    "pool": ("pool", "maxpool", "avgpool"),
    "reduce": ("sum", "mean", "reduce", "reduction", "max", "min", "argmax", "argmin", "var", "std", "cumsum",
               "logsumexp", "prod"),
    "activation": ("relu", "gelu", "silu", "sigmoid", "tanh", "swish", "mish", "elu", "selu", "softplus",
                   "activation", "hardtanh", "hardswish"),
    "elementwise": ("add", "sub", "mul", "div", "pow", "exp", "log", "sqrt", "abs", "clamp", "elementwise"),
    "attention": ("attention", "attn", "sdpa", "flash"),
}
# nn layers that hold parameters or structure but compute nothing themselves.
_NN_CONTAINERS = {"Parameter", "ParameterList", "ParameterDict", "ModuleList", "ModuleDict", "Identity",
                  "Buffer"}
_TENSOR_METHODS = {"matmul", "mm", "bmm", "softmax", "log_softmax", "relu", "sigmoid", "tanh", "exp", "log", "sum",
                   "mean", "norm", "cumsum", "clamp", "pow", "sqrt", "amax", "logsumexp", "addmm", "baddbmm", "var",
                   "std", "prod", "argmax", "argmin"}
_ONE_SHOT_BODY = re.compile(r"(\w+)\s*\[\s*(\w+)\s*\]\s*=\s*(\w+)\s*\[\s*\2\s*\]\s*\+\s*(\w+)\s*\[\s*\2\s*\]")
_LOW_PRECISION_CUDA = re.compile(r"\b(__half2?|half2?|__nv_bfloat16|__nv_bfloat162|__float2half\w*|"
                                 r"__float2bfloat16\w*|nv_bfloat16|wmma::)\b")
_LOW_PRECISION_PY = re.compile(r"(\.half\(\)|\.bfloat16\(\)|torch\.(float16|half|bfloat16)\b)")
_STREAM_CUDA = re.compile(r"\b(cudaStreamCreate\w*|getStreamFromPool|setCurrentCUDAStream|cudaStreamPerThread)\b")
_THREAD_CUDA = re.compile(r"\b(std::thread|std::async|pthread_create|std::jthread)\b")
_TIMER_CUDA = re.compile(r"\b(cudaEventRecord|cudaEventElapsedTime|cudaEventSynchronize)\b")


@dataclass
class _Context:
    anatomy: Anatomy
    reader: FileReader
    reading: Reading
    reference: Anatomy | None
    findings: list[Finding]

    def add(self, code: str, span: Span, message: str, severity: str = "warning",
            also: tuple[Related, ...] = ()) -> None:
        finding = Finding(code, message, span, severity, also)  # type: ignore[arg-type]
        if finding not in self.findings:
            self.findings.append(finding)

    def model_part(self, part: str, message: str) -> tuple[Related, ...]:
        """A part of the reference's `class Model`, in whichever file holds it; none without a reference."""
        return () if self.reference is None else related.model_part(self.reference, self.anatomy, part, message)


def find_deceptions(anatomy: Anatomy, reader: FileReader, reading: Reading,
                    reference: Anatomy | None = None) -> list[Finding]:
    """Static findings on the file's ModelNew. A file without ModelNew (a problem) has none."""
    solution = anatomy.model_new
    if solution is None or "ModelNew" not in reading.classes:
        return []
    reference = reference if reference is not None and reference.model is not None else (
        anatomy if anatomy.model is not None else None)
    context = _Context(anatomy, reader, reading, reference, [])
    class_node = reading.classes["ModelNew"]
    path = _forward_path(class_node, reader)
    called = _extension_calls(anatomy, solution, path, reader)
    _check_binding(context, solution, called)
    _check_torch_ops(context, class_node, path, called)
    _check_one_shot(context)
    _check_exceptions(context, path)
    _check_reference_reuse(context, solution, class_node)
    _check_escapes(context)
    _check_precision(context, path)
    _check_identity_cache(context, path)
    _check_signature(context, solution)
    return sorted(context.findings, key=lambda f: (f.span.start, f.code))


# -- what forward runs ------------------------------------------------------------------------------------------------
def _forward_path(class_node: Node, reader: FileReader) -> list[Node]:
    """forward, plus the methods and module-level functions it calls (transitively): the code a trial runs."""
    methods = methods_of(class_node, reader)
    functions = {}
    for statement in module_statements(reader.tree.root_node):
        definition = definition_of(statement)
        if definition is not None and definition.type == "function_definition":
            name = definition.child_by_field_name("name")
            if name is not None:
                functions[reader.source(name)] = definition
    if "forward" not in methods:
        return []
    seen: list[Node] = []
    todo = [methods["forward"]]
    while todo:
        node = todo.pop()
        if any(node.id == s.id for s in seen):
            continue
        seen.append(node)
        for call in descendants_of(node, "call"):
            callee = call.child_by_field_name("function")
            text = reader.source(callee) if callee is not None else ""
            if text.startswith("self.") and text[5:] in methods and text[5:] != "__init__":
                todo.append(methods[text[5:]])
            elif text in functions and text not in ("get_inputs", "get_init_inputs"):
                todo.append(functions[text])
    return seen


def _extension_calls(anatomy: Anatomy, solution: ClassInfo, path: list[Node], reader: FileReader) -> dict[int, list]:
    """For each extension (by index), the calls on the forward path that reach one of its bound functions."""
    out: dict[int, list] = {}
    for index, extension in enumerate(anatomy.extensions):
        receivers = {f"self.{attr}" for attr, target in solution.bindings.items()
                     if target == extension.variable or target == f"self.{attr}" and extension.variable == target}
        if extension.variable:
            receivers.add(extension.variable)
        hits = []
        for node in path:
            for call in descendants_of(node, "call"):
                callee = call.child_by_field_name("function")
                text = reader.source(callee) if callee is not None else ""
                receiver, _, function = text.rpartition(".")
                if receiver in receivers and (not extension.functions or function in extension.functions):
                    hits.append(call)
        out[index] = hits
    return out


# -- the paper's three kinds ------------------------------------------------------------------------------------------
def _check_binding(context: _Context, solution: ClassInfo, called: dict[int, list]) -> None:
    for index, extension in enumerate(context.anatomy.extensions):
        kernels = [f for source in extension.cuda_sources for f in source.functions if f.kind == "global"]
        if not extension.functions:
            context.add(KERNEL_NOT_BOUND, extension.call,
                        "the extension is compiled with no `functions=[...]`, so Python cannot call any of its kernels",
                        also=related.kernels_of(extension, "kernel `{name}` cannot be reached from Python"))
            continue
        used = any(target == extension.variable for target in solution.bindings.values()) or bool(called[index])
        bound_self = any(target.startswith("self.") for target in solution.bindings.values())
        if not used and not bound_self:
            name = extension.variable or extension.name or "the extension"
            context.add(KERNEL_NOT_BOUND, extension.call,
                        f"`{name}` is compiled but ModelNew never binds or uses it: its kernels never run",
                        also=related.kernels_of(extension, "kernel `{name}` never runs"))
            continue
        if not called[index]:
            context.add(BINDING_NOT_CALLED, solution.forward or solution.name_span,
                        f"forward never calls the compiled extension's functions ({', '.join(extension.functions)}): "
                        "the custom kernel never runs",
                        also=related.hosts_of(extension, extension.functions, "`{name}` is bound but never called"))
        bound_hosts = set(extension.functions)
        all_code = "\n".join(s.value for s in extension.sources)
        for kernel in kernels:
            launchers = [f for s in extension.sources for f in s.functions
                         if f.kind != "global" and f.name != kernel.name and launches(s.value[f.value_span.start:
                                                                                               f.value_span.end],
                                                                                      kernel.name)]
            if not launches(all_code, kernel.name):
                context.add(KERNEL_NOT_BOUND, kernel.name_span,
                            f"kernel `{kernel.name}` is compiled but no host function launches it",
                            also=related.hosts_of(extension, bound_hosts, "`{name}` is bound but does not launch it"))
            elif launchers and not any(f.name in bound_hosts or _reaches(f.name, bound_hosts, extension)
                                       for f in launchers):
                context.add(KERNEL_NOT_BOUND, kernel.name_span,
                            f"kernel `{kernel.name}` is launched only from "
                            f"{', '.join('`' + f.name + '`' for f in launchers)}, which `functions=[...]` does not bind",
                            also=tuple(Related(f.name_span, f"`{f.name}` launches it but is not bound")
                                       for f in launchers))


def _reaches(host: str, bound: set[str], extension: Extension) -> bool:
    """Whether some bound host function calls `host` (a launcher helper)."""
    pattern = re.compile(rf"\b{re.escape(host)}\s*\(")
    for source in extension.sources:
        for function in source.functions:
            if function.name in bound and pattern.search(source.value[function.value_span.start:
                                                                      function.value_span.end]):
                return True
    return False


def _check_torch_ops(context: _Context, class_node: Node, path: list[Node], called: dict[int, list]) -> None:
    reader = context.reader
    aliases = _functional_aliases(reader)
    layers = _nn_layers(class_node, reader)
    kernel_words = {w for k in context.anatomy.kernels for w in _words(k.name)}
    kernel_words |= {w for e in context.anatomy.extensions for name in e.functions for w in _words(name)}
    any_kernel_called = any(called.values())
    for node in path:
        for op, family, span in _torch_ops(node, reader, aliases, layers):
            words = _FAMILY_WORDS.get(family, (op,))
            if not any_kernel_called:
                context.add(TORCH_FALLBACK, span, f"forward computes with PyTorch (`{op}`) and never runs a custom "
                                                  "kernel: the speedup would be PyTorch's, not yours",
                            also=tuple(Related(k.name_span, f"kernel `{k.name}` is compiled but forward never runs it")
                                       for k in context.anatomy.kernels))
            elif kernel_words & set(words) or op in kernel_words:
                context.add(TORCH_FALLBACK, span, f"forward computes `{op}` with PyTorch although a custom kernel "
                                                  f"here is named for that job ({family})",
                            also=_named_for(context.anatomy, set(words) | {op}))
            else:
                context.add(TORCH_FALLBACK, span, f"forward also runs PyTorch's `{op}`; its time counts in the "
                                                  "speedup, and only the rest is custom", "information")


def _named_for(anatomy: Anatomy, words: set[str]) -> tuple[Related, ...]:
    """The kernels and bound host functions whose names say they do the job `words` name."""
    bound = {name for extension in anatomy.extensions for name in extension.functions}
    return tuple(Related(f.name_span, f"`{f.name}` is named for this job")
                 for source in anatomy.sources for f in source.functions
                 if (f.kind == "global" or f.name in bound) and _words(f.name) & words)


def _torch_ops(node: Node, reader: FileReader, aliases: set[str], layers: dict[str, str]):
    for child in descendants_of(node, "binary_operator"):
        operator = child.child_by_field_name("operator")
        if operator is not None and operator.type == "@":
            yield "@", "matmul", reader.span(child)
    for child in descendants_of(node, "augmented_assignment"):
        operator = child.child_by_field_name("operator")
        if operator is not None and reader.source(operator) == "@=":
            yield "@=", "matmul", reader.span(child)
    for call in descendants_of(node, "call"):
        callee = call.child_by_field_name("function")
        if callee is None:
            continue
        text = reader.source(callee).replace(" ", "")
        receiver, _, name = text.rpartition(".")
        if receiver in {"torch", "torch.nn.functional", "torch.special", "torch.linalg"} | aliases:
            family = _OP_FAMILY.get(name)
            if family is not None or receiver in aliases | {"torch.nn.functional"}:
                yield text, family or name, reader.span(call)
        elif receiver == "self" and name in layers:
            layer = layers[name]
            yield f"self.{name} ({layer})", _layer_family(layer), reader.span(call)
        elif receiver and not receiver.startswith(("torch", "self.")) and name in _TENSOR_METHODS:
            yield f".{name}()", _OP_FAMILY.get(name, name), reader.span(call)


def _layer_family(layer: str) -> str:
    lowered = layer.lower()
    for family, words in (("conv", ("conv",)), ("matmul", ("linear", "bilinear")), ("norm", ("norm",)),
                          ("pool", ("pool",)), ("softmax", ("softmax",)), ("attention", ("attention",))):
        if any(w in lowered for w in words):
            return family
    return "activation" if lowered in {op.replace("_", "") for op in _FAMILIES["activation"]} else lowered


def _functional_aliases(reader: FileReader) -> set[str]:
    aliases = set()
    for match in re.finditer(r"import\s+torch\.nn\.functional\s+as\s+(\w+)", reader.text):
        aliases.add(match.group(1))
    for match in re.finditer(r"from\s+torch\.nn\s+import\s+functional\s+as\s+(\w+)", reader.text):
        aliases.add(match.group(1))
    return aliases


def _nn_layers(class_node: Node, reader: FileReader) -> dict[str, str]:
    """self.<attr> = nn.<Layer>(...) in __init__: attributes whose call runs a PyTorch layer."""
    init = methods_of(class_node, reader).get("__init__")
    layers = {}
    if init is None:
        return layers
    for assignment in descendants_of(init, "assignment"):
        left, right = assignment.child_by_field_name("left"), assignment.child_by_field_name("right")
        if left is None or right is None or right.type != "call":
            continue
        target = reader.source(left)
        callee = reader.source(right.child_by_field_name("function") or right)
        prefix, _, layer = callee.rpartition(".")
        if target.startswith("self.") and prefix in ("nn", "torch.nn") and layer not in _NN_CONTAINERS:
            layers[target[5:]] = layer
    return layers


def _words(name: str) -> set[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()
    return {w for w in re.split(r"[^a-z0-9]+", spaced) if w} | {spaced.replace("_", "")}


def _check_one_shot(context: _Context) -> None:
    reference = context.reference
    reference_is_add = False
    if reference is not None and reference.model is not None and reference.model.forward is not None:
        body = reference.model.forward.slice(reference.text)
        returns = re.findall(r"return\s+(.+)", body)
        reference_is_add = bool(returns) and all(re.fullmatch(r"\w+\s*\+\s*\w+|torch\.add\(\s*\w+\s*,\s*\w+\s*\)",
                                                              r.strip()) for r in returns)
    if reference_is_add:
        return
    for source in context.anatomy.cuda_sources:
        for kernel in source.functions:
            if kernel.kind != "global":
                continue
            body = source.value[kernel.value_span.start:kernel.value_span.end]
            statements = [s for s in re.split(r"[;{}]", body) if "=" in s and "==" not in s]
            copies_example = kernel.name == "elementwise_add_kernel" or (
                _ONE_SHOT_BODY.search(body) is not None and len(statements) <= 3)
            if not copies_example:
                continue
            what = ("the reference does not add two tensors" if reference is not None
                    else "check that it implements this problem")
            context.add(ONE_SHOT_COPY, kernel.name_span,
                        f"kernel `{kernel.name}` is the prompt's one-shot elementwise-add example; {what}",
                        "warning" if reference is not None else "information",
                        also=context.model_part("forward", "what the problem computes"))


def _check_exceptions(context: _Context, path: list[Node]) -> None:
    reader = context.reader
    for node in path:
        for statement in descendants_of(node, "try_statement"):
            context.add(EXCEPTION_FALLBACK, reader.span(statement),
                        "try/except in forward: a failing kernel can silently fall back to PyTorch",
                        also=_handlers(statement, reader, "runs instead when the kernel fails"))
    root = reader.tree.root_node
    for statement in descendants_of(root, "try_statement"):
        body = statement.child_by_field_name("body")
        if body is not None and "load_inline" in reader.source(body):
            context.add(EXCEPTION_FALLBACK, reader.span(statement),
                        "the extension's build is wrapped in try/except: a failed build can fall back to PyTorch",
                        also=_handlers(statement, reader, "runs instead when the build fails"))


def _handlers(statement: Node, reader: FileReader, message: str) -> tuple[Related, ...]:
    """The `except` clauses of a try statement, on their first line: where the fallback is."""
    return tuple(Related(reader.span(clause), message) for clause in statement.children
                 if clause.type in ("except_clause", "except_group_clause"))


def _check_reference_reuse(context: _Context, solution: ClassInfo, class_node: Node) -> None:
    reader = context.reader
    for base in solution.bases:
        if base.rsplit(".", 1)[-1] == "Model":
            context.add(REFERENCE_REUSE, solution.name_span,
                        "ModelNew inherits from Model: the reference's code can run instead of the kernel",
                        also=context.model_part("class", "the reference it inherits"))
    for call in descendants_of(class_node, "call"):
        callee = call.child_by_field_name("function")
        text = reader.source(callee).replace(" ", "") if callee is not None else ""
        if text in ("Model", "Model.forward") or text.endswith(".Model") or (
                text == "super().forward" and any(b.rsplit(".", 1)[-1] == "Model" for b in solution.bases)):
            context.add(REFERENCE_REUSE, reader.span(call), f"ModelNew calls the reference (`{text}`)",
                        also=context.model_part("forward", "the reference's forward, which runs instead"))


def _check_escapes(context: _Context) -> None:
    reader = context.reader
    python = reader.tree.root_node
    for call in descendants_of(python, "call"):
        callee = call.child_by_field_name("function")
        text = reader.source(callee).replace(" ", "") if callee is not None else ""
        if re.search(r"(^|\.)cuda\.(Stream|stream|set_stream|ExternalStream)$", text):
            context.add(SIDE_STREAM, reader.span(call), f"`{text}` runs work on another CUDA stream, which the "
                                                        "timer on the default stream does not see")
        elif re.search(r"(^|\.)(Thread|ThreadPoolExecutor|ProcessPoolExecutor|Process|Pool)$", text):
            context.add(THREAD, reader.span(call), f"`{text}` runs work on another thread or process, "
                                                   "outside the timed region")
    for match in re.finditer(r"^\s*(import|from)\s+(threading|concurrent\.futures|multiprocessing)\b", reader.text,
                             re.MULTILINE):
        context.add(THREAD, Span(match.start(2), match.end(2)),
                    f"imports `{match.group(2)}`: work on another thread or process escapes the timer")
    for assignment in list(descendants_of(python, "assignment")) + list(descendants_of(python, "augmented_assignment")):
        left = assignment.child_by_field_name("left")
        text = reader.source(left).replace(" ", "") if left is not None else ""
        if left is not None and left.type == "attribute" and text.split(".")[0] in ("torch", "time", "triton") and \
                not text.endswith("allow_tf32"):
            context.add(TIMER_PATCH, reader.span(assignment),
                        f"assigns to `{text}`: patching torch or the timer changes what the harness measures")
    for call in descendants_of(python, "call"):
        callee = call.child_by_field_name("function")
        arguments = call.child_by_field_name("arguments")
        if callee is not None and reader.source(callee) == "setattr" and arguments is not None and \
                arguments.named_children and reader.source(arguments.named_children[0]).split(".")[0] in (
                    "torch", "time", "triton"):
            context.add(TIMER_PATCH, reader.span(call), "patches torch or the timer with setattr")
    for source in context.anatomy.sources:
        for pattern, code, message in (
                (_STREAM_CUDA, SIDE_STREAM, "creates or switches CUDA streams; the timer may miss the work"),
                (_THREAD_CUDA, THREAD, "starts host threads; work may run outside the timed region"),
                (_TIMER_CUDA, TIMER_PATCH, "records CUDA events itself; only the harness should time")):
            for match in pattern.finditer(source.value):
                start = source.text_offset(match.start())
                context.add(code, Span(start, source.text_offset(match.end() - 1) + 1),
                            f"`{match.group(0)}` {message}")


def _check_precision(context: _Context, path: list[Node]) -> None:
    reference = context.reference
    reference_text = reference.text if reference is not None else ""
    if _LOW_PRECISION_PY.search(reference_text) or re.search(r"\b(half|bfloat16|float16)\b", reference_text):
        return  # the reference itself works in half precision
    reader = context.reader
    for match in re.finditer(r"allow_tf32\s*=\s*True|set_float32_matmul_precision\(\s*['\"](high|medium)['\"]",
                             reader.text):
        context.add(PRECISION, Span(match.start(), match.end()),
                    "enables TF32: the comparison against the fp32 reference must use the same setting")
    for node in path:
        for match in _LOW_PRECISION_PY.finditer(reader.source(node)):
            start = reader.offsets.char(node.start_byte + len(reader.source(node)[:match.start()].encode("utf-8")))
            context.add(PRECISION, Span(start, start + len(match.group(0))),
                        f"forward converts to lower precision (`{match.group(0)}`) against an fp32 reference")
    for source in context.anatomy.cuda_sources:
        match = _LOW_PRECISION_CUDA.search(source.value)
        if match is not None:
            start = source.text_offset(match.start())
            context.add(PRECISION, Span(start, source.text_offset(match.end() - 1) + 1),
                        f"the kernel computes in lower precision (`{match.group(0)}`) than the fp32 reference; "
                        "the tolerance may hide the error")


def _check_identity_cache(context: _Context, path: list[Node]) -> None:
    reader = context.reader
    for node in path:
        for call in descendants_of(node, "call"):
            callee = call.child_by_field_name("function")
            text = reader.source(callee).replace(" ", "") if callee is not None else ""
            if text.endswith(".data_ptr") or text == "id":
                context.add(OUTPUT_CACHED, reader.span(call),
                            "forward keys on input identity; results cached by pointer go stale when the inputs "
                            "change in place")


def _check_signature(context: _Context, solution: ClassInfo) -> None:
    reference = context.reference
    if reference is None or reference.model is None:
        return
    model = reference.model
    if model.forward is not None and solution.forward is not None and \
            len(model.forward_params) != len(solution.forward_params):
        context.add(SIGNATURE_MISMATCH, solution.forward,
                    f"forward takes ({', '.join(solution.forward_params)}) but Model's takes "
                    f"({', '.join(model.forward_params)})", also=context.model_part("forward", "Model's forward"))
    if model.init is not None and solution.init is not None and \
            len(model.init_params) != len(solution.init_params):
        context.add(SIGNATURE_MISMATCH, solution.init,
                    f"__init__ takes ({', '.join(solution.init_params)}) but Model's takes "
                    f"({', '.join(model.init_params)}); get_init_inputs() feeds both",
                    also=context.model_part("__init__", "Model's __init__"))
