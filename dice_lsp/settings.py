"""The user's settings (`dice.*` in the editor), with the bounds each value must keep and their defaults, which
`python3 -m dice_lsp.settings --package-json PATH` writes into the extension's package.json. The defaults are not
decided here: a check's come from the harness's `Options`, decoding's from the engine's `DecodeSettings`.

`read_settings` turns what a client sends (camelCase keys under the `dice` section, from `initializationOptions`,
`workspace/configuration` or a pushed `didChangeConfiguration`) into `Settings` with cattrs, and says, setting by
setting, what it could not use and why; each of those keeps its default.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Callable, get_args, get_type_hints

import cattrs
from cattrs.errors import AttributeValidationNote, ClassValidationError
from cattrs.gen import make_dict_structure_fn, override

from dice_lsp.engine.settings import DecodeSettings
from dice_lsp.harness.options import Options, Sandbox

_ENGINE = DecodeSettings()
_CHECK = Options()  # the harness owns how a check runs by default; the editor's settings start from it
_CHOICES = {item.name: tuple(item.metadata["choices"]) for item in fields(DecodeSettings) if "choices" in item.metadata}


def _engine(name: str, **bounds: Any) -> Any:
    """A decoding field with the engine's default and the bounds the engine accepts (engine/decode.py `resolve`)."""
    return field(default=getattr(_ENGINE, name), metadata=bounds)


@dataclass(frozen=True)
class Decoding:
    """`dice.decoding.*`: the engine's DecodeSettings defaults (their one owner), block size left to the checkpoint."""

    block_size: int | None = field(default=None, metadata={"minimum": 1})  # None: the checkpoint's block_size
    steps: int = _engine("steps", minimum=1)
    strategy: str = _engine("strategy", enum=_CHOICES["strategy"])
    threshold: float = _engine("threshold", minimum=0, maximum=1)
    temperature: float = _engine("temperature", minimum=0)
    top_k: int = _engine("top_k", minimum=0)
    top_p: float = _engine("top_p", exclusiveMinimum=0, maximum=1)
    max_new_tokens: int = _engine("max_new_tokens", minimum=1)
    confidence: str = _engine("confidence", enum=_CHOICES["confidence"])
    given_prefix: bool = _engine("given_prefix")
    prompt_template: str = _engine("prompt_template")  # a JSON file; "" the checkpoint's, else ours; "built-in"


# "auto", "cpu", "cuda" or "cuda:N": what the harness and the engine resolve to a device.
DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


@dataclass(frozen=True)
class Settings:
    model: str = ""  # a local directory or a hub id in the local cache; "" is the bundled default model
    device: str = field(default=_CHECK.device, metadata={"pattern": DEVICE.pattern})  # the engine's too
    dtype: str = field(default="auto", metadata={"enum": ("auto", "bfloat16", "float16", "float32")})
    decoding: Decoding = field(default_factory=Decoding)
    run_on_save: bool = True
    correctness_trials: int = field(default=_CHECK.correctness_trials, metadata={"minimum": 1})
    timing_trials: int = field(default=_CHECK.timing_trials, metadata={"minimum": 1})
    tolerance: float = field(default=_CHECK.atol, metadata={"minimum": 0})  # both atol and rtol
    baseline: str = field(default=_CHECK.baseline, metadata={"enum": ("both", "eager", "compile")})  # no "none"
    # "sibling": <name>_dice.py beside the reference; "sameFile": appended to the reference's file
    solution_location: str = field(default="sibling", metadata={"enum": ("sibling", "sameFile")})
    trusted_workspace: bool = False  # the client sets this; nothing from a file is built or run until it is true
    cuda_home: str = _CHECK.cuda_home
    # Where code from the user's files runs: "auto" sandboxed when bubblewrap can start here, "require" nowhere else
    sandbox: str = field(default=_CHECK.sandbox, metadata={"enum": get_args(Sandbox)})
    build_timeout: float = field(default=_CHECK.build_timeout, metadata={"exclusiveMinimum": 0})
    run_timeout: float = field(default=_CHECK.run_timeout, metadata={"exclusiveMinimum": 0})

    @classmethod
    def from_client(cls, raw: Any) -> Settings:
        """Settings from the `dice` section a client sent; what cannot be used keeps its default (read_settings says
        why)."""
        return read_settings(raw).settings

    def to_client(self) -> dict[str, Any]:
        return _dump(self)


@dataclass(frozen=True)
class Reading:
    """What `read_settings` made of a client's section: the settings, and one line per value it could not use."""

    settings: Settings
    problems: tuple[str, ...] = ()


def read_settings(raw: Any, base: Any = None) -> Reading:
    """Settings from the `dice` section `raw`, laid over `base` (another section, such as the client's
    `initializationOptions`; `raw` wins key by key). Keys the server does not know, and values of the wrong type or
    out of bounds, are named in `problems` ("dice.timingTrials: must be at least 1, got 0; using 100")."""
    merged = _merge(base if isinstance(base, dict) else {}, raw if isinstance(raw, dict) else {})
    problems = [f"{SECTION}.{key}: not a dice-lsp setting" for key in _unknown(merged, Settings)]
    try:
        return Reading(_CONVERTER.structure(merged, Settings), tuple(problems))
    except ClassValidationError as error:
        rejected = list(_rejected(error))
    for path, why in rejected:
        default = _default(path)
        problems.append(f"{SECTION}.{'.'.join(path)}: {why}; using "
                        f"{'the defaults' if isinstance(default, dict) else json.dumps(default)}")
        _drop(merged, path)
    return Reading(_CONVERTER.structure(merged, Settings), tuple(problems))


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in top.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _unknown(raw: dict[str, Any], kind: type, prefix: str = "") -> list[str]:
    """Keys of `raw` that name no field of `kind` (the extension's own launch settings are not the server's)."""
    hints = get_type_hints(kind)
    known = {_camel(item.name): hints[item.name] for item in fields(kind)}
    out = []
    for key, value in raw.items():
        name = prefix + key
        if key not in known:
            if f"{SECTION}.{name}" not in CLIENT_ONLY and name != "trace":
                out.append(name)
        elif is_dataclass(known[key]) and isinstance(value, dict):
            out.extend(_unknown(value, known[key], name + "."))
    return out


def _rejected(error: ClassValidationError, path: tuple[str, ...] = ()):
    """(camelCase path, why) for each value cattrs could not structure."""
    for inner in error.exceptions:
        notes = [n for n in getattr(inner, "__notes__", []) if isinstance(n, AttributeValidationNote)]
        here = path + ((_camel(notes[0].name),) if notes else ())
        if isinstance(inner, ClassValidationError):
            yield from _rejected(inner, here)
        else:
            yield here, str(inner)


def _drop(raw: dict[str, Any], path: tuple[str, ...]) -> None:
    for key in path[:-1]:
        raw = raw.get(key, {})
    if isinstance(raw, dict):
        raw.pop(path[-1], None)


def _default(path: tuple[str, ...]) -> Any:
    """The default of the setting at `path` (camelCase keys), as JSON shows it."""
    value: Any = Settings()
    for key in path:
        value = next(getattr(value, item.name) for item in fields(value) if _camel(item.name) == key)
    return _dump(value) if is_dataclass(value) else value


def _dump(value: Any) -> dict[str, Any]:
    out = {}
    for item in fields(value):
        current = getattr(value, item.name)
        out[_camel(item.name)] = _dump(current) if isinstance(current, Decoding) else current
    return out


# -- reading a client's values with cattrs: exact JSON types, then each field's bounds ------------------------------
_WORDS = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}


def _exact(kind: type) -> Callable[[Any, Any], Any]:
    """JSON values as they are: no "5" for 5, no true for 1 (cattrs' defaults would convert both)."""
    def structure(value: Any, _: Any) -> Any:
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise ValueError(f"expected {_WORDS[kind]}, got {json.dumps(value)}")
        return value
    return structure


def _bounded(kind: Any, bounds: dict[str, Any]) -> Callable[[Any, Any], Any]:
    """Structure as `kind` (None allowed where it is optional), then hold the field's bounds."""
    optional = type(None) in get_args(kind)
    inner = next((k for k in get_args(kind) if k is not type(None)), kind) if optional else kind
    plain = _CONVERTER.get_structure_hook(inner)

    def structure(raw: Any, _: Any) -> Any:
        if raw is None and optional:
            return None
        value, shown = plain(raw, inner), json.dumps(raw)
        if "minimum" in bounds and value < bounds["minimum"]:
            raise ValueError(f"must be at least {bounds['minimum']}, got {shown}")
        if "exclusiveMinimum" in bounds and value <= bounds["exclusiveMinimum"]:
            raise ValueError(f"must be above {bounds['exclusiveMinimum']}, got {shown}")
        if "maximum" in bounds and value > bounds["maximum"]:
            raise ValueError(f"must be at most {bounds['maximum']}, got {shown}")
        if "enum" in bounds and value not in bounds["enum"]:
            raise ValueError(f"expected one of {', '.join(json.dumps(c) for c in bounds['enum'])}, got {shown}")
        if "pattern" in bounds and not re.fullmatch(bounds["pattern"], value):
            raise ValueError(f"expected {_PATTERN_WORDS[bounds['pattern']]}, got {shown}")
        return value
    return structure


def _section(kind: type) -> Callable[[Any, Any], Any]:
    """A JSON object read into `kind` field by field (camelCase keys; unknown ones are left to `_unknown`)."""
    hints = get_type_hints(kind)
    fill = make_dict_structure_fn(kind, _CONVERTER, **{
        item.name: override(rename=_camel(item.name),
                            struct_hook=_bounded(hints[item.name], dict(item.metadata)) if item.metadata else None)
        for item in fields(kind)})

    def structure(value: Any, _: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError(f"expected an object, got {json.dumps(value)}")
        return fill(value, kind)
    return structure


_PATTERN_WORDS = {DEVICE.pattern: '"auto", "cpu", "cuda" or "cuda:N"'}
_CONVERTER = cattrs.Converter(detailed_validation=True, forbid_extra_keys=False)
for _kind in _WORDS:
    _CONVERTER.register_structure_hook(_kind, _exact(_kind))
for _kind in (Decoding, Settings):
    _CONVERTER.register_structure_hook(_kind, _section(_kind))


# -- package.json: the extension declares these settings; their defaults and the decoding help come from here --------
SECTION = "dice"
CLIENT_SET = ("trusted_workspace",)  # the client sets it from the editor's trust; no user setting declares it
# read by the extension only: how it starts the server (interpreter, arguments, its own copy or the interpreter's,
# log level) and which of the server's messages it pops up
CLIENT_ONLY = ("dice.interpreter", "dice.serverArgs", "dice.trace.server", "dice.importStrategy", "dice.logLevel",
               "dice.showNotifications")


def declared() -> dict[str, Any]:
    """Every `dice.*` setting the server reads, by its package.json key, with its default."""
    return {key: default for key, default, _ in _declarations()}


def _declarations():
    """(package.json key, default, bounds) of every setting a user sets."""
    for item in fields(Settings):
        if item.name in CLIENT_SET:
            continue
        value = getattr(Settings(), item.name)
        if isinstance(value, Decoding):
            for inner in fields(Decoding):
                yield f"{SECTION}.decoding.{_camel(inner.name)}", getattr(value, inner.name), inner.metadata
        else:
            yield f"{SECTION}.{_camel(item.name)}", value, item.metadata


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
    """`package` (the extension's package.json) with each setting's default, bounds and choices, and each decoding
    setting's description, taken from here. Raises ValueError for a setting package.json does not declare."""
    properties = package["contributes"]["configuration"]["properties"]
    missing = sorted(set(declared()) - set(properties))
    if missing:
        raise ValueError(f"package.json does not declare {', '.join(missing)}: add each with its type and description")
    for key, default, rules in _declarations():
        declaration = properties[key]
        if not _same(declaration.get("default"), default):
            declaration["default"] = default
        for bound in ("minimum", "exclusiveMinimum", "maximum"):
            if bound in rules:
                declaration[bound] = rules[bound]
            else:
                declaration.pop(bound, None)
        if "enum" in rules and declaration.get("enum") != list(rules["enum"]):
            declaration["enum"] = list(rules["enum"])
            declaration.pop("enumDescriptions", None)  # they described other choices
        if "pattern" in rules:
            declaration["pattern"] = f"^(?:{rules['pattern']})$"
            declaration["patternErrorMessage"] = f"Expected {_PATTERN_WORDS[rules['pattern']]}."
    for key, words in decoding_help().items():
        declaration = properties[key]
        declaration.pop("markdownDescription", None)
        declaration["description"] = words["description"]
        if words["choices"] is not None:
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
