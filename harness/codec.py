"""Frozen dataclasses to JSON-ready values and back, each field checked against its type annotation on the way in.

The worker protocol's codec (`harness.messages`): a worker runs the candidate, so what it sends is data to check,
never to trust; a value that does not fit its annotation raises `MessageError`, saying where.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any

from dice_lsp.harness.options import Options


class MessageError(ValueError):
    """A line that is no message of its direction: not JSON, an unknown name, a missing or ill-typed field."""


def plain(value: Any) -> Any:
    """JSON-ready form of a message's value; `Options` as `Options.to_dict()`."""
    if isinstance(value, Options):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


@functools.lru_cache(maxsize=None)
def _hints(kind: type) -> dict[str, Any]:
    return typing.get_type_hints(kind)


def from_json(kind: type, raw: Any, where: str) -> Any:
    """An instance of the dataclass `kind` from its JSON object, every field checked against its annotation."""
    if not isinstance(raw, dict):
        raise MessageError(f"{where} is {type(raw).__name__}, not an object")
    fields = [f for f in dataclasses.fields(kind) if f.init]
    unknown = set(raw) - {f.name for f in fields}
    if unknown:
        raise MessageError(f"{where} has no field {short(sorted(map(str, unknown))[0])}")
    values = {}
    for f in fields:
        if f.name in raw:
            values[f.name] = _value(_hints(kind)[f.name], raw[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise MessageError(f"{where} lacks {f.name}")
    return kind(**values)


def _value(kind: Any, value: Any, where: str) -> Any:
    """`value` as the annotation `kind` says: JSON's arrays become tuples where a tuple is annotated."""
    if kind is Any:
        return value
    if kind is Options:  # from the trusted caller: read as the options do themselves
        if not isinstance(value, dict):
            raise MessageError(f"{where} is {type(value).__name__}, not an object")
        return Options.from_dict(value)
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        [inner] = [a for a in args if a is not type(None)]  # every optional field here is `X | None`
        return _value(inner, value, where)
    if dataclasses.is_dataclass(kind):
        return from_json(kind, value, where)
    if origin in (tuple, list):
        if not isinstance(value, list):
            raise MessageError(f"{where} is {type(value).__name__}, not an array")
        items = [_value(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise MessageError(f"{where} is {type(value).__name__}, not an object")
        return {k: _value(args[1], v, f"{where}[{short(k)}]") for k, v in value.items()}
    if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind in (int, str, bool) and isinstance(value, kind) and (kind is bool or not isinstance(value, bool)):
        return value
    raise MessageError(f"{where} is {type(value).__name__}, not {getattr(kind, '__name__', kind)}")


def short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
