"""The decoding flags of `generate`, `eval` and `train rl`, made from their owners: help texts, choices and defaults
from the engine's DecodeSettings (defaults through the object a command passes, the editor's by default), the bounds
each value must keep from the editor's settings (dice_lsp.settings.Decoding), which package.json also reads.
"""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import Any, Callable, get_args, get_type_hints

from dice_lsp.commands.arguments import at_least, number
from dice_lsp.commands.errors import CommandError
from dice_lsp.engine.settings import DecodeSettings
from dice_lsp.settings import Decoding

# Every decoding flag, in the order of --help. `train rl` takes fewer: its --steps counts optimizer steps.
FLAGS = ("block_size", "steps", "strategy", "threshold", "temperature", "top_k", "top_p", "max_new_tokens", "confidence",
         "given_prefix", "prompt_template")
_FIELDS = {item.name: item for item in fields(DecodeSettings)}
_BOUNDED = {item.name: item for item in fields(Decoding)}
_KINDS = {name: next(k for k in (*get_args(hint), hint) if k in (int, float, str, bool))
          for name, hint in get_type_hints(Decoding).items()}


def flag_type(name: str) -> Callable[[str], Any]:
    """The argparse type of one decoding flag: its field's kind, held to the bounds settings.Decoding keeps for it
    (the values the engine accepts; engine.decode.resolve checks them again with the checkpoint at hand), so that a
    bad one is a usage error before the model loads."""
    bounds, kind = _BOUNDED[name].metadata, _KINDS[name]
    if kind is str:
        return str
    low = bounds.get("minimum", bounds.get("exclusiveMinimum", float("-inf")))
    high, low_open = bounds.get("maximum", float("inf")), "exclusiveMinimum" in bounds
    if kind is int and high == float("inf"):
        return at_least(int(low) + 1 if low_open else int(low))
    if kind is int:
        raise TypeError(f"no flag type for an integer with a maximum ({name})")
    return number(low, high, low_open=low_open)


def add_decoding_options(group, defaults=None, names: tuple[str, ...] = FLAGS) -> None:
    """One flag per DecodeSettings field in `names` (--block-size, --steps, ...) with the field's help and choices;
    each default is the one `defaults` holds: the editor's Decoding when None (block size unset: the checkpoint's)."""
    defaults = Decoding() if defaults is None else defaults
    for name in names:
        owner = _FIELDS[name]
        default = getattr(defaults, name)
        help_text = owner.metadata["help"].replace("%", "%%")  # argparse formats help with %
        options = {"default": default, "help": help_text if default is None else help_text + "; default %(default)s"}
        if "choices" in owner.metadata:
            options["choices"] = owner.metadata["choices"]
        elif isinstance(default, bool):
            options["action"] = argparse.BooleanOptionalAction  # --given-prefix / --no-given-prefix
        else:
            options["type"] = flag_type(name)
        group.add_argument("--" + name.replace("_", "-"), **options)


def decoding_from(args: argparse.Namespace) -> Decoding:
    """The editor's Decoding, which the engine reads, from the flags `add_decoding_options` added with all names."""
    return Decoding(**{name: getattr(args, name) for name in FLAGS})


def refuse_identical_samples(samples: int | None, decoding: Decoding, what: str = "kernels") -> None:
    """Several samples of one prompt under greedy decoding (top-k 1, or temperature 0) are one text decoded several
    times over, at as many times the cost: a CommandError that says which flag makes them differ."""
    if (samples or 1) > 1 and (decoding.top_k == 1 or decoding.temperature == 0):
        raise CommandError(f"--samples {samples} with greedy decoding (--top-k {decoding.top_k}, --temperature "
                           f"{decoding.temperature:g}) would write {samples} identical {what}; sample instead with "
                           "--top-k 0 (or --top-k K > 1) and --temperature above 0")
