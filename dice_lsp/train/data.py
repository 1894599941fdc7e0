"""Training data: JSONL {reference, solution} pairs made into prompt and answer tokens (end-to-end and infilling).

Prompts are engine.prompts', the ones served: a model is trained on exactly what it will be asked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from dice_lsp.engine import prompts
from dice_lsp.engine.errors import EngineError
from dice_lsp.train.errors import TrainError


@dataclass(frozen=True)
class Pair:
    """One line of a training JSONL: a KernelBench problem, optionally a solution, and its difficulty level."""

    reference: str
    solution: str | None = None
    level: int = 0
    line: int = 0  # 1-based line in the file, for messages


@dataclass(frozen=True)
class Sample:
    """Token ids of one prompt and its answer (the answer ends with the chat's end-of-turn token)."""

    prompt_ids: tuple[int, ...]
    answer_ids: tuple[int, ...]
    kind: str  # "e2e" or "infill"
    pair: int  # index of the pair it came from


def read_pairs(path, need_solution: bool = True) -> list[Pair]:
    """Pairs from a JSONL file; a bad line raises TrainError naming it."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise TrainError(f"cannot read {path}: {error.strerror or error}") from None
    pairs = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except ValueError as error:
            raise TrainError(f"{path}:{number} is not JSON ({error}); each line must be one JSON object") from None
        if not isinstance(raw, dict) or not isinstance(raw.get("reference"), str):
            raise TrainError(f"{path}:{number} has no string 'reference'; lines look like "
                             '{"reference": "...", "solution": "..."}')
        solution = raw.get("solution")
        if need_solution and not isinstance(solution, str):
            raise TrainError(f"{path}:{number} has no string 'solution'")
        pairs.append(Pair(raw["reference"], solution if isinstance(solution, str) else None,
                          int(raw.get("level") or 0), number))
    if not pairs:
        raise TrainError(f"{path} holds no pairs")
    return pairs


def easy_to_hard(pairs: list[Pair]) -> list[Pair]:
    """KernelBench level first, then the reference's length: the curriculum order of BiC-RL."""
    return sorted(pairs, key=lambda p: (p.level, len(p.reference)))


def prompt_messages(pair: Pair, kind: str) -> list[dict[str, str]] | None:
    """The chat messages serving sends for `pair` (engine.prompts, as generate_kernel builds them): the one-shot
    end-to-end prompt, or for "infill" the prompt with the solution as the skeleton; None when it has no core."""
    if kind == "e2e":
        return prompts.end_to_end_prompt(pair.reference)
    if not pair.solution:
        return None
    try:
        prefix, _, suffix = prompts.skeleton_parts(pair.solution)
    except EngineError:
        return None
    return prompts.infill_prompt(pair.reference, prefix, suffix)


def prompt_ids(tokenizer, pair: Pair, kind: str) -> list[int] | None:
    """The prompt tokens of `pair` for stage `kind` ("e2e" or "infill"), rendered through the checkpoint's chat
    template exactly as the engine renders them when it serves; None when an infilling prompt is impossible."""
    messages = prompt_messages(pair, kind)
    if messages is None:
        return None
    return tokenizer.encode(prompts.render(messages, tokenizer.chat_template))


def answer_text(solution: str) -> str:
    """The answer DICE writes: the whole solution file in one codeblock."""
    return f"```python\n{solution.strip()}\n```"


def answer_ids(tokenizer, solution: str, end_id: int) -> list[int]:
    """The answer's tokens, then the end-of-turn token."""
    return tokenizer.encode(answer_text(solution)) + [end_id]


def end_of_turn(tokenizer, config) -> int:
    token = tokenizer.token_id("<|im_end|>")
    return int(token) if token is not None else config.eos_token_id


def sft_samples(tokenizer, config, pairs: list[Pair], kinds=("e2e", "infill")) -> tuple[list[Sample], dict]:
    """Samples of every kind for every pair, and counts of what was skipped and why."""
    unknown = sorted(set(kinds) - {"e2e", "infill"})
    if unknown:
        raise TrainError(f"unknown sample kind {', '.join(unknown)}: use e2e, infill or both")
    end = end_of_turn(tokenizer, config)
    samples, skipped = [], {}
    for index, pair in enumerate(pairs):
        answer = tuple(answer_ids(tokenizer, pair.solution, end))
        for kind in kinds:
            prompt = prompt_ids(tokenizer, pair, kind)
            if prompt is None:
                reason = "infill: no prefix/core/suffix split"
                skipped[reason] = skipped.get(reason, 0) + 1
                continue
            samples.append(Sample(tuple(prompt), answer, kind, index))
    return samples, skipped
