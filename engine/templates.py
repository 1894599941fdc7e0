"""Prompt templates as data: the words a checkpoint is asked in, read from a JSON file beside its config.json (or
named by the dice.decoding.promptTemplate setting), so that a DICE checkpoint can be asked in the words it learned.

Torch-free and parser-free: loading a checkpoint reads its template without importing the prompt machinery.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from dice_lsp.engine.errors import EngineError

TEMPLATE_FILE = "prompt_template.json"  # beside config.json: the prompts the checkpoint was trained on
BUILT_IN_NAME = "built-in"  # the setting's value that asks for ours even where a checkpoint has its own
# The placeholders each prompt must hold; the user's text replaces them.
PLACEHOLDERS = {"end_to_end": ("reference",), "infill": ("reference", "prefix", "suffix")}
_PLACEHOLDER = re.compile(r"\{(reference|prefix|suffix)\}")
_KEYS = ("system", "end_to_end", "infill", "answer_prefix")


@dataclass(frozen=True)
class PromptTemplate:
    """What a checkpoint is asked: the user turn of the end-to-end and the infilling prompt, with {reference} (and
    {prefix}, {suffix}) where the user's code goes; an optional system turn; and `answer_prefix`, the text every
    reply of the training data began with, which decoding is given instead of writing it (dice.decoding.givenPrefix).

    Placeholders are replaced in one pass, so the user's code may hold "{prefix}" and any other braces stay as they
    are: a one-shot example's CUDA code needs no escaping.
    """

    end_to_end: str
    infill: str
    system: str | None = None  # None: no system turn
    answer_prefix: str = ""
    origin: str = BUILT_IN_NAME  # the file it was read from, for messages

    def end_to_end_messages(self, reference: str) -> list[dict[str, str]]:
        return self._messages(self.end_to_end, reference=reference)

    def infill_messages(self, reference: str, prefix: str, suffix: str) -> list[dict[str, str]]:
        return self._messages(self.infill, reference=reference, prefix=prefix, suffix=suffix)

    def _messages(self, user: str, **values: str) -> list[dict[str, str]]:
        content = _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), user)
        system = [] if self.system is None else [{"role": "system", "content": self.system}]
        return system + [{"role": "user", "content": content}]

    def to_json(self) -> str:
        """The template as a prompt_template.json holds it: a starting point for writing another."""
        data = {key: value for key, value in asdict(self).items() if key in _KEYS}
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def read_template(path: str | Path) -> PromptTemplate:
    """The template in the JSON file `path`; an EngineError naming the file and what is wrong with it."""
    path = Path(path).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise EngineError(f"no prompt template {path}: give the path of a JSON file with \"end_to_end\" and "
                          "\"infill\" prompts (README, \"Prompt templates\")") from None
    except (OSError, UnicodeDecodeError) as error:
        raise EngineError(f"cannot read the prompt template {path}: {getattr(error, 'strerror', None) or error}"
                          ) from None
    try:
        raw = json.loads(text)
    except ValueError as error:
        raise EngineError(f"the prompt template {path} is not JSON: {error}") from None
    return template_from(raw, str(path))


def template_from(raw: object, origin: str) -> PromptTemplate:
    """A PromptTemplate from a JSON object; every problem is named at once, with the file (`origin`)."""
    if not isinstance(raw, dict):
        raise EngineError(f"the prompt template {origin} must be a JSON object with the keys "
                          f"{', '.join(_KEYS)}, not {type(raw).__name__}")
    problems = [f"unknown key {key!r} (the keys are {', '.join(_KEYS)})" for key in raw if key not in _KEYS]
    for kind, names in PLACEHOLDERS.items():
        value = raw.get(kind)
        if not isinstance(value, str):
            problems.append(f"{kind!r} must be a string holding {_words(names)}"
                            + ("" if kind not in raw else f", not {type(value).__name__}"))
            continue
        found = set(_PLACEHOLDER.findall(value))
        missing = [name for name in names if name not in found]
        if missing:
            problems.append(f"{kind!r} lacks the placeholder{'s' * (len(missing) > 1)} {_words(missing)}")
        foreign = sorted(found - set(names))
        if foreign:
            problems.append(f"{kind!r} holds {_words(foreign)}, which only the infilling prompt fills")
    if not isinstance(raw.get("system"), (str, type(None))):
        problems.append("'system' must be a string, or null for no system turn")
    if not isinstance(raw.get("answer_prefix", ""), str):
        problems.append("'answer_prefix' must be a string")
    if problems:
        raise EngineError(f"the prompt template {origin} is not usable: " + "; ".join(problems))
    return PromptTemplate(end_to_end=raw["end_to_end"], infill=raw["infill"], system=raw.get("system"),
                          answer_prefix=raw.get("answer_prefix", ""), origin=origin)


def checkpoint_template(checkpoint: Path) -> PromptTemplate | None:
    """The checkpoint's own template (TEMPLATE_FILE beside its config.json), None when it has none."""
    path = Path(checkpoint) / TEMPLATE_FILE
    return read_template(path) if path.is_file() else None


def template_for(choice: str, own: PromptTemplate | None, built_in: PromptTemplate) -> PromptTemplate:
    """The template to ask a checkpoint in: the file `choice` (the setting) names, `built_in` when it says
    "built-in", else the checkpoint's `own`, else `built_in`."""
    choice = (choice or "").strip()
    if choice == BUILT_IN_NAME:
        return built_in
    if choice:
        return read_template(choice)
    return own if own is not None else built_in


def _words(names) -> str:
    marked = [f"{{{name}}}" for name in names]
    return marked[0] if len(marked) == 1 else ", ".join(marked[:-1]) + " and " + marked[-1]
