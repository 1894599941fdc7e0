"""Training data: JSONL {reference, solution} pairs made into prompts and answers (end-to-end and infilling).

Infilling uses anatomy's DICE split: the prompt shows the solution's prefix and suffix, the answer is the whole file.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from engine.train.errors import TrainError

FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)

END_TO_END = (
    "You write custom CUDA kernels to replace the PyTorch operators in the given architecture to get speedups.\n\n"
    "You are given the following architecture:\n\n```python\n{reference}\n```\n\n"
    "Optimize the architecture named Model with custom CUDA operators! Name your optimized output architecture "
    "ModelNew. Output the new code in codeblocks. Please generate real code, NOT pseudocode, make sure the code "
    "compiles and is fully functional. Just output the new model code, no other text, and NO testing code!"
)
INFILLING = (
    "You write custom CUDA kernels to replace the PyTorch operators in the given architecture to get speedups.\n\n"
    "You are given the following architecture:\n\n```python\n{reference}\n```\n\n"
    "Here is the beginning of an optimized ModelNew that uses custom CUDA operators:\n\n```python\n{prefix}\n```\n\n"
    "and here is its end:\n\n```python\n{suffix}\n```\n\n"
    "Write the missing CUDA source in between. Output the whole completed file in one codeblock."
)


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


def split(solution: str):
    """The (prefix, core, suffix) texts of a solution by anatomy's DICE split, or None when it has none."""
    from dice_lsp.anatomy import parse

    splits = parse(solution).splits
    if not splits:
        return None
    first = splits[0]
    return first.prefix.slice(solution), first.core.slice(solution), first.suffix.slice(solution)


def chat(tokenizer, user: str) -> list[int]:
    """Token ids of one user turn through the checkpoint's chat template, ending with the assistant's opening."""
    template = tokenizer.chat_template
    if not template:
        raise TrainError("the checkpoint's tokenizer has no chat template; add chat_template.jinja beside it")
    import jinja2

    environment = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    text = environment.from_string(template).render(
        messages=[{"role": "user", "content": user}], add_generation_prompt=True, enable_thinking=False)
    return tokenizer.encode(text)


def prompt_ids(tokenizer, pair: Pair, kind: str) -> list[int] | None:
    """The prompt of `pair` for stage `kind` ("e2e" or "infill"); None when an infilling prompt is impossible."""
    if kind == "e2e":
        return chat(tokenizer, END_TO_END.format(reference=pair.reference.strip()))
    parts = split(pair.solution) if pair.solution else None
    if parts is None:
        return None
    prefix, _, suffix = parts
    return chat(tokenizer, INFILLING.format(reference=pair.reference.strip(), prefix=prefix.strip(),
                                            suffix=suffix.strip()))


def answer_ids(tokenizer, solution: str, end_id: int) -> list[int]:
    """The answer DICE writes: the whole solution file in one codeblock, then the end-of-turn token."""
    return tokenizer.encode(f"```python\n{solution.strip()}\n```") + [end_id]


def end_of_turn(tokenizer, config) -> int:
    token = tokenizer.token_id("<|im_end|>")
    return int(token) if token is not None else config.eos_token_id


def sft_samples(tokenizer, config, pairs: list[Pair], kinds=("e2e", "infill")) -> tuple[list[Sample], dict]:
    """Samples of every kind for every pair, and counts of what was skipped and why."""
    end = end_of_turn(tokenizer, config)
    samples, skipped = [], {}
    for index, pair in enumerate(pairs):
        answer = tuple(answer_ids(tokenizer, pair.solution, end))
        for kind in kinds:
            prompt = prompt_ids(tokenizer, pair, kind)
            if prompt is None:
                skipped["infill: no prefix/core/suffix split"] = skipped.get("infill: no prefix/core/suffix split", 0) + 1
                continue
            samples.append(Sample(tuple(prompt), answer, kind, index))
    return samples, skipped


def extract_code(text: str) -> str:
    """The solution file in a model's answer: the longest fenced block, or the whole text when there is none."""
    blocks = FENCE.findall(text)
    if not blocks:
        return text.strip().removeprefix("```python").strip("`\n ")
    return max(blocks, key=len).strip() + "\n"
