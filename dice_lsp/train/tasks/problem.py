"""How a reference problem is written, apart from what it computes: the Problem a template draws (its parts as
text) and the Layout that writes it as a file, the way people write PyTorch modules.

A layout varies where the sizes live (module constants, UPPER_CASE, literals, locals of get_inputs), docstrings
(none, one line, Google, NumPy, reST), type hints, comments, argument and size names, torch.rand or torch.randn
and the size (tiny, as drawn, or grown to gigabytes in the text only). Some options are held out: a layout that
uses one is "heldout-style" and never reaches training, so a model's score on those measures the phrasing it has
never seen. The op split (`split_of` in __init__) is decided apart from this one.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, replace



@dataclass(frozen=True)
class Problem:
    """One reference problem as parts; `constants` holds `name = literal` lines, the other parts use those names."""

    init_params: str
    init_body: str
    forward_params: str
    forward_body: str
    constants: str
    inputs: str
    init_inputs: str
    what: str  # the op as a noun phrase, for docstrings: "a GELU activation, elementwise"
    functional: bool = False
    grow: str | None = "first"  # the size constant that may grow or shrink ("first": the first one; None: none)
    rand_ok: bool = True  # whether torch.randn inputs may be drawn with torch.rand instead
    max_gb: float = 4.0  # the most a grown problem's inputs may take
    limit: int = 1 << 40  # the most the grown size may reach (a kernel's grid limit, say)
    imports: tuple[str, ...] = ()  # more modules the reference imports ("math")
    renames: bool = True  # whether forward's tensor names may change (no, where they carry meaning)

    def sizes(self) -> list[tuple[str, str]]:
        return [(name.strip(), value.strip()) for name, _, value in
                (line.partition("=") for line in self.constants.strip().split("\n") if line.strip())]


def problem(**parts) -> Problem:
    return Problem(**parts)


# -- the options of each axis; the ones after "|" are held out --------------------------------------------------------
LAYOUTS = ("module", "upper", "inline", "annotated", "|", "locals")
DOCS = ("none", "line", "google", "numpy", "|", "rest")
CLASS_PHRASES = ("{What}.", "Computes {what}.", "A module that applies {what}.", "Model computing {what}.",
                 "This model performs {what} on its inputs.", "Wraps {what} in an nn.Module.",
                 "|", "Evaluates {what} and returns the result.", "Minimal PyTorch module: {what}.")
ONE_NAMES = ("x", "input", "tensor", "inputs", "features", "data", "|", "inp", "values")
TWO_NAMES = (("a", "b"), ("x", "y"), ("A", "B"), ("lhs", "rhs"), ("input", "other"), "|", ("first", "second"))
SIZE_NAMES = {"batch_size": ("batch_size", "batch", "bs", "num_rows", "|", "n_samples"),
              "dim": ("dim", "features", "hidden", "d", "|", "width_dim"),
              "channels": ("channels", "num_channels", "c", "|", "chans"),
              "in_features": ("in_features", "input_dim", "|", "fan_in"),
              "out_features": ("out_features", "output_dim", "|", "fan_out")}


def _pool(options: tuple, heldout: bool) -> list:
    cut = options.index("|")
    return list(options[cut + 1:] if heldout else options[:cut])


@dataclass(frozen=True)
class Layout:
    """The choices that change how a reference reads, never what it computes."""

    constants: str  # one of LAYOUTS
    docs: str  # one of DOCS
    phrase: str  # one of CLASS_PHRASES
    hints: bool
    comments: bool
    one_name: str  # forward's tensor name when it has one
    two_names: tuple[str, str]  # ... and when it has two
    size_names: tuple[tuple[str, str], ...]  # renamed size constants
    rand: bool  # torch.rand instead of torch.randn where the problem allows it
    size: str  # "tiny", "drawn" or "large"
    from_import: bool  # `from torch import nn` instead of `import torch.nn as nn`

    @property
    def key(self) -> str:
        """A short name of the layout, as the JSONL's `style` field."""
        return "-".join([self.constants, self.docs, f"p{CLASS_PHRASES.index(self.phrase)}",
                         "hints" if self.hints else "plain", self.one_name, "+".join(self.two_names),
                         "rand" if self.rand else "randn", self.size] + [new for _, new in self.size_names])

    @property
    def heldout(self) -> bool:
        return any(self._held(value, options) for value, options in self._axes())

    def _axes(self):
        yield self.constants, LAYOUTS
        yield self.docs, DOCS
        yield self.phrase, CLASS_PHRASES
        yield self.one_name, ONE_NAMES
        yield self.two_names, TWO_NAMES
        for old, new in self.size_names:
            yield new, SIZE_NAMES[old]

    @staticmethod
    def _held(value, options: tuple) -> bool:
        return value in options[options.index("|") + 1:]


PLAIN = Layout("module", "none", CLASS_PHRASES[0], False, False, "x", ("a", "b"), (), False, "drawn", False)


def sample_layout(rng: random.Random, heldout: bool = False, size: str | None = None) -> Layout:
    """A training layout, or with `heldout` one that uses at least one held-out option (the other axes drawn from
    the training options, so each held-out option is tried in company the model knows)."""
    axes = ["constants", "docs", "phrase", "one_name", "two_names", "size_names"]
    forced = rng.choice(axes) if heldout else None

    def pick(axis: str, options: tuple):
        return rng.choice(_pool(options, axis == forced or (heldout and rng.random() < 0.25)))

    renamed = tuple((old, pick("size_names", names)) for old, names in SIZE_NAMES.items() if rng.random() < 0.5
                    or forced == "size_names")
    layout = Layout(
        constants=pick("constants", LAYOUTS), docs=pick("docs", DOCS), phrase=pick("phrase", CLASS_PHRASES),
        hints=rng.random() < 0.5, comments=rng.random() < 0.4, one_name=pick("one_name", ONE_NAMES),
        two_names=pick("two_names", TWO_NAMES), size_names=renamed, rand=rng.random() < 0.3,
        size=size or rng.choices(("tiny", "drawn", "large"), (0.15, 0.65, 0.2))[0],
        from_import=rng.random() < 0.3)
    if heldout and not layout.heldout:  # the forced axis had nothing to rename (size names drawn from train)
        layout = replace(layout, constants="locals")
    return layout


# -- writing the file -------------------------------------------------------------------------------------------------
def _indent(lines: str, spaces: int) -> str:
    pad = " " * spaces
    return "\n".join(pad + line if line.strip() else "" for line in lines.strip("\n").split("\n"))


def _name(word: str) -> str:
    """A regex for `word` as a Python name, not an attribute nor a keyword argument (`dim=-1`)."""
    return rf"(?<![\w.]){re.escape(word)}(?![\w])(?!\s*=(?!=))"


def _split_top(text: str) -> list[str]:
    """`text` cut at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += char in "([{"
        depth -= char in ")]}"
        if char == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    return parts + ([tail] if tail else [])


def input_bytes(problem: Problem, values: dict[str, str]) -> int:
    """Bytes of get_inputs' tensors at these sizes, counted on the meta device (nothing is allocated). torch is
    imported here: the command line's --help must not pay for it."""
    import torch

    space: dict = {"torch": torch, "math": __import__("math")}
    for name, value in values.items():
        space[name] = eval(value, space)  # literals this package wrote
    with torch.device("meta"):
        tensors = eval(f"[{problem.inputs}]", space)
    return sum(t.numel() * t.element_size() for t in tensors)


def _resized(problem: Problem, layout: Layout, rng: random.Random) -> dict[str, str]:
    values = dict(problem.sizes())
    grow = next(iter(values), None) if problem.grow == "first" else problem.grow
    if grow is None or layout.size == "drawn" or not values[grow].isdigit():
        return values
    drawn = int(values[grow])
    if layout.size == "tiny":
        values[grow] = str(min(drawn, rng.choice((1, 2, 3, 4))))
        return values
    target = rng.uniform(0.5, problem.max_gb) * (1 << 30)
    per_unit = max(1, input_bytes(problem, {**values, grow: "2"}) - input_bytes(problem, {**values, grow: "1"}))
    fixed = input_bytes(problem, {**values, grow: "1"}) - per_unit
    values[grow] = str(min(problem.limit, max(drawn, int((target - fixed) / per_unit))))
    return values


def _final_names(problem: Problem, layout: Layout) -> dict[str, str]:
    """Size constant -> the name the file uses (renamed, then upper-cased), skipping names that would collide."""
    taken = {name.lower() for name, _ in problem.sizes()} | {p.strip().split(":")[0].lower()
                                                            for p in _split_top(problem.init_params)}
    names = {}
    renamed = dict(layout.size_names)
    for name, _ in problem.sizes():
        new = renamed.get(name, name)
        if new != name and new.lower() in taken:
            new = name
        taken.add(new.lower())
        names[name] = new.upper() if layout.constants == "upper" else new
    return names


def _shape_of(expr: str) -> str:
    match = re.search(r"torch\.(?:randn|rand|ones|zeros)\(([^()]*)\)", expr)
    return f" of shape ({match.group(1)})" if match else ""


def _describe(name: str) -> str:
    known = {"dim": "the dimension to work along", "eps": "a small value added for numerical stability",
             "scale": "the factor the result is multiplied by", "normalized_shape": "the size of the last dimension",
             "in_features": "the size of each input row", "out_features": "the size of each output row",
             "kernel_size": "the size of the window", "stride": "the step between windows",
             "padding": "implicit padding on each side", "dilation": "the spacing between window elements",
             "in_channels": "channels of the input", "out_channels": "channels of the output",
             "groups": "blocked connections from input to output channels", "bias": "whether to add a learned bias",
             "num_groups": "how many groups the channels are split into", "num_features": "the number of channels",
             "margin": "the margin of the loss", "beta": "where the loss turns from quadratic to linear"}
    return known.get(name, name.replace("_", " "))


def _docstring(layout: Layout, summary: str, params: list[tuple[str, str, str]], returns: str) -> str:
    """A docstring body (no quotes) in the layout's convention; params are (name, type, description)."""
    if layout.docs == "google":
        lines = [summary, ""]
        if params:
            lines += ["Args:"] + [f"    {n} ({t}): {d[0].upper() + d[1:]}." for n, t, d in params]
        if returns:
            lines += ["", "Returns:", f"    torch.Tensor: {returns[0].upper() + returns[1:]}."]
        return "\n".join(lines).strip()
    if layout.docs == "numpy":
        lines = [summary, ""]
        if params:
            lines += ["Parameters", "----------"]
            for n, t, d in params:
                lines += [f"{n} : {t}", f"    {d[0].upper() + d[1:]}."]
        if returns:
            lines += ["", "Returns", "-------", "torch.Tensor", f"    {returns[0].upper() + returns[1:]}."]
        return "\n".join(lines).strip()
    if layout.docs == "rest":
        lines = [summary, ""] + [f":param {n}: {d}" for n, t, d in params]
        return "\n".join(lines + ([f":returns: {returns}"] if returns else [])).strip()
    return summary


def _doc_block(text: str, spaces: int) -> str:
    if "\n" not in text:
        return " " * spaces + f'"""{text}"""\n'
    return _indent(f'"""{text}\n"""', spaces) + "\n"


def shown(problem: Problem, layout: Layout) -> Layout:
    """`layout` with the choices `problem` leaves unseen set to the plain ones: what the file really shows, so a
    layout counts as held out only when its file shows a held-out option."""
    params = _split_top(problem.forward_params) if problem.renames else []
    sizes = dict(problem.sizes())
    names = _final_names(problem, layout)
    return replace(
        layout, phrase=layout.phrase if layout.docs != "none" else PLAIN.phrase,
        one_name=layout.one_name if len(params) == 1 else PLAIN.one_name,
        two_names=layout.two_names if len(params) == 2 else PLAIN.two_names,
        size_names=tuple((old, new) for old, new in layout.size_names
                         if old in sizes and names[old].lower() == new.lower() and layout.constants != "inline"),
        constants=layout.constants if sizes else PLAIN.constants,
        rand=layout.rand and problem.rand_ok and "torch.randn(" in problem.inputs)


def write(problem: Problem, layout: Layout, rng: random.Random) -> str:
    """The reference file of `problem` in `layout`."""
    values = _resized(problem, layout, rng)
    names = _final_names(problem, layout)
    inputs, init_inputs = problem.inputs, problem.init_inputs
    if layout.rand and problem.rand_ok:
        inputs = inputs.replace("torch.randn(", "torch.rand(")
    inline = layout.constants == "inline"
    for old, new in names.items():
        replacement = values[old] if inline else new
        inputs = re.sub(_name(old), replacement, inputs)
        init_inputs = re.sub(_name(old), replacement, init_inputs)
    forward_params, forward_body = problem.forward_params, problem.forward_body
    params = _split_top(forward_params)
    if problem.renames and len(params) in (1, 2):
        chosen = [layout.one_name] if len(params) == 1 else list(layout.two_names)
        for old, new in zip(params, chosen):
            forward_body = re.sub(_name(old), new, forward_body)
        params = chosen
    what = problem.what
    summary = layout.phrase.format(what=what, What=what[0].upper() + what[1:])

    head = ["import torch", "from torch import nn" if layout.from_import else "import torch.nn as nn"]
    head += ["import torch.nn.functional as F"] if problem.functional else []
    head = [f"import {module}" for module in problem.imports] + head
    init_params = _split_top(problem.init_params)
    if not layout.hints:  # "stride: int = 1" -> "stride=1"
        init_params = [re.sub(r"\s*:[^=]*?(\s*=\s*|$)", lambda m: "=" if "=" in m.group(0) else "", p)
                       for p in init_params]
    init_signature = ", ".join(["self"] + init_params)
    tensor_type = "torch.Tensor"
    forward_signature = ", ".join(["self"] + [f"{p}: {tensor_type}" if layout.hints else p for p in params])
    returns = f" -> {tensor_type}" if layout.hints else ""

    out = "\n".join(head) + "\n\n\nclass Model(nn.Module):\n"
    if layout.docs != "none":
        out += _doc_block(summary, 4) + "\n"
    out += f"    def __init__({init_signature}):\n"
    init_doc = [(p.split(":")[0].strip(), p.split(":")[1].split("=")[0].strip() if ":" in p else "int",
                 _describe(p.split(":")[0].strip())) for p in _split_top(problem.init_params)]
    if layout.docs not in ("none", "line") and init_doc:
        out += _doc_block(_docstring(layout, "Keeps the settings the forward pass uses.", init_doc, ""), 8)
    out += "        super().__init__()\n"
    if problem.init_body.strip():
        out += _indent(problem.init_body, 8) + "\n"
    out += f"\n    def forward({forward_signature}){returns}:\n"
    shapes = [_shape_of(expr) for expr in _split_top(inputs)]
    if layout.docs not in ("none", "line"):
        described = [(p, tensor_type, f"input tensor{shape}") for p, shape in zip(params, shapes + [""] * 3)]
        out += _doc_block(_docstring(layout, summary, described, "the result"), 8)
    if layout.comments:
        out += f"        # {what}\n"
    out += _indent(forward_body, 8) + "\n\n\n"
    out += _constants(problem, layout, values, names)
    out += _function("get_inputs", inputs, problem, layout, values, names)
    out += "\n\n" + _function("get_init_inputs", init_inputs, problem, layout, values, names)
    return out


def _constants(problem: Problem, layout: Layout, values: dict[str, str], names: dict[str, str]) -> str:
    if layout.constants in ("inline", "locals") or not values:
        return ""
    lines = ["# Problem sizes"] if layout.comments else []
    for old, value in values.items():
        if layout.constants == "annotated":
            kind = "float" if "." in value or "e" in value else "int"
            lines.append(f"{names[old]}: {kind} = {value}")
        else:
            lines.append(f"{names[old]} = {value}")
    return "\n".join(lines) + "\n\n\n"


def _function(name: str, returned: str, problem: Problem, layout: Layout, values: dict[str, str],
              names: dict[str, str]) -> str:
    body = []
    if layout.constants == "locals":
        body = [f"{names[old]} = {value}" for old, value in values.items() if re.search(_name(names[old]), returned)]
    if name == "get_inputs" and layout.comments and problem.rand_ok:
        body.append("# random inputs, made on the CPU")
    body.append(f"return [{returned}]")
    return f"def {name}():\n" + _indent("\n".join(body), 4) + "\n"
