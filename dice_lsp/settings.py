"""The user's settings (`dice.*` in the editor), with defaults, read from `workspace/configuration`.

The VS Code extension declares the same keys in its package.json; `Settings.from_client` accepts what the client
sends (camelCase keys under the `dice` section) and ignores what it does not know.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from dice_lsp.engine.decode import DecodeSettings


_ENGINE = DecodeSettings()


@dataclass(frozen=True)
class Decoding:
    """`dice.decoding.*`: the engine's DecodeSettings defaults (their one owner), block size left to the checkpoint."""

    block_size: int | None = None  # None: the checkpoint's config.json block_size
    steps: int = _ENGINE.steps
    strategy: str = _ENGINE.strategy
    threshold: float = _ENGINE.threshold
    temperature: float = _ENGINE.temperature
    top_k: int = _ENGINE.top_k
    top_p: float = _ENGINE.top_p
    max_new_tokens: int = _ENGINE.max_new_tokens


@dataclass(frozen=True)
class Settings:
    model: str = ""  # a local directory or a hub id in the local cache; "" is the bundled default model
    device: str = "auto"  # "auto" | "cuda" | "cuda:N" | "cpu"
    dtype: str = "auto"  # "auto" | "bfloat16" | "float16" | "float32"
    decoding: Decoding = field(default_factory=Decoding)
    run_on_save: bool = True
    correctness_trials: int = 5
    timing_trials: int = 100
    tolerance: float = 1e-2
    baseline: str = "both"  # "eager" | "compile" | "both"
    solution_location: str = "sibling"  # "sibling": <name>_dice.py beside the reference; "sameFile"
    trusted_workspace: bool = False  # the client sets this; nothing from a file is built or run until it is true
    cuda_home: str = ""
    build_timeout: float = 600.0
    run_timeout: float = 120.0

    @classmethod
    def from_client(cls, raw: Any) -> Settings:
        """Settings from the `dice` section a client sent; unknown keys and ill-typed values fall back to defaults."""
        if not isinstance(raw, dict):
            return cls()
        return _fill(cls(), raw)

    def to_client(self) -> dict[str, Any]:
        return _dump(self)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _fill(default: Any, raw: dict[str, Any]) -> Any:
    changes = {}
    for item in fields(default):
        key = _camel(item.name)
        if key not in raw:
            continue
        current = getattr(default, item.name)
        value = raw[key]
        if isinstance(current, (Decoding,)):
            if isinstance(value, dict):
                changes[item.name] = _fill(current, value)
            continue
        if item.name == "block_size":
            if value is None or (isinstance(value, int) and not isinstance(value, bool) and value > 0):
                changes[item.name] = value
            continue
        if isinstance(current, bool):
            if isinstance(value, bool):
                changes[item.name] = value
        elif isinstance(current, int):
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                changes[item.name] = value
        elif isinstance(current, float):
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
                changes[item.name] = float(value)
        elif isinstance(current, str):
            if isinstance(value, str):
                changes[item.name] = value
    return replace(default, **changes)


def _dump(value: Any) -> dict[str, Any]:
    out = {}
    for item in fields(value):
        current = getattr(value, item.name)
        out[_camel(item.name)] = _dump(current) if isinstance(current, Decoding) else current
    return out
