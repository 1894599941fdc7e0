"""The decoding flags of `generate`, `eval` and `train rl`, made from their one owner, the engine's DecodeSettings.

Help texts and choices come from its fields; defaults from the object a command passes (the editor's by default).
"""

from __future__ import annotations

import argparse
from dataclasses import fields

from dice_lsp.engine.settings import DecodeSettings
from dice_lsp.settings import Decoding

# Every decoding flag, in the order of --help. `train rl` takes fewer: its --steps counts optimizer steps.
FLAGS = ("block_size", "steps", "strategy", "threshold", "temperature", "top_k", "top_p", "max_new_tokens")

_FIELDS = {item.name: item for item in fields(DecodeSettings)}


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
        else:
            options["type"] = type(owner.default)
        group.add_argument("--" + name.replace("_", "-"), **options)


def decoding_from(args: argparse.Namespace) -> Decoding:
    """The editor's Decoding, which the engine reads, from the flags `add_decoding_options` added with all names."""
    return Decoding(**{name: getattr(args, name) for name in FLAGS})
