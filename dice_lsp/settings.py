"""The user's settings (`dice.*` in the editor), with defaults, read from `workspace/configuration`; the one owner of
those defaults, which `python3 -m dice_lsp.settings --package-json PATH` writes into the extension's package.json.

`Settings.from_client` accepts what the client sends (camelCase keys under the `dice` section) and ignores what it
does not know.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from dice_lsp.engine.settings import DecodeSettings

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


# -- package.json: the extension declares these settings; their defaults and the decoding help come from here --------
SECTION = "dice"
CLIENT_SET = ("trusted_workspace",)  # the client sets it from the editor's trust; no user setting declares it
CLIENT_ONLY = ("dice.interpreter", "dice.serverArgs", "dice.trace.server")  # how the extension starts the server


def declared() -> dict[str, Any]:
    """Every `dice.*` setting the server reads, by its package.json key, with its default."""
    out = {}
    for item in fields(Settings):
        if item.name in CLIENT_SET:
            continue
        value = getattr(Settings(), item.name)
        if isinstance(value, Decoding):
            for inner in fields(Decoding):
                out[f"{SECTION}.decoding.{_camel(inner.name)}"] = getattr(value, inner.name)
        else:
            out[f"{SECTION}.{_camel(item.name)}"] = value
    return out


def decoding_help() -> dict[str, dict[str, Any]]:
    """The engine's help (and choices) for each `dice.decoding.*` key, as package.json words it."""
    engine = {item.name: item.metadata for item in fields(DecodeSettings)}
    out = {}
    for item in fields(Decoding):
        metadata = engine.get(item.name, {})
        if "help" in metadata:
            text = metadata["help"]
            out[f"{SECTION}.decoding.{_camel(item.name)}"] = {"description": text[0].upper() + text[1:] + ".",
                                                            "choices": metadata.get("choices")}
    return out


def package_json(package: dict[str, Any]) -> dict[str, Any]:
    """`package` (the extension's package.json) with each setting's default, and each decoding setting's
    description and enum, taken from here. Raises ValueError for a setting package.json does not declare."""
    properties = package["contributes"]["configuration"]["properties"]
    missing = sorted(set(declared()) - set(properties))
    if missing:
        raise ValueError(f"package.json does not declare {', '.join(missing)}: add each with its type and description")
    for key, default in declared().items():
        if not _same(properties[key].get("default"), default):
            properties[key]["default"] = default
    for key, words in decoding_help().items():
        declaration = properties[key]
        declaration.pop("markdownDescription", None)
        declaration["description"] = words["description"]
        if words["choices"] is not None:
            declaration["enum"] = list(words["choices"])
            declaration.pop("enumDescriptions", None)  # the description names each choice
    return package


def _same(old: Any, new: Any) -> bool:
    """Equal as JSON values: 600 and 600.0 are the same default, True and 1 are not."""
    return old == new and isinstance(old, bool) == isinstance(new, bool)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m dice_lsp.settings",
                                     description="Write the settings' defaults into the VS Code extension.")
    parser.add_argument("--package-json", type=Path, required=True, metavar="PATH",
                        help="vscode-extension/package.json, rewritten in place")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when the file is out of date")
    args = parser.parse_args(argv)
    text = args.package_json.read_text()
    updated = json.dumps(package_json(json.loads(text)), indent=2, ensure_ascii=False) + "\n"
    if updated == text:
        return 0
    if args.check:
        print(f"{args.package_json} is out of date: run python3 -m dice_lsp.settings --package-json "
              f"{args.package_json}", file=sys.stderr)
        return 1
    args.package_json.write_text(updated)
    print(f"updated {args.package_json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
