"""How to decode: `DecodeSettings`, the one owner of the decoding defaults, each field with its help text.

Torch-free on purpose: the editor's settings, package.json and the CLI's help read it without loading the model code.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class DecodeSettings:
    """How to decode, and the one owner of the decoding defaults (DICE's evaluation setting): the editor's
    `dice.decoding.*` settings, package.json, and the CLI's flags and help all read them from here."""

    block_size: int = field(default=4, metadata={"help": "tokens per block (unset: the checkpoint's)"})
    steps: int = field(default=4, metadata={"help": "denoising passes per block at most"})
    strategy: str = field(default="static", metadata={
        "help": "static: a fixed number of tokens per pass; dynamic: also every token above the threshold",
        "choices": ("static", "dynamic")})
    threshold: float = field(default=0.9, metadata={"help": "dynamic: commit every token whose confidence exceeds this"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature (0: greedy)"})
    top_k: int = field(default=1, metadata={"help": "sample among the k most likely tokens (0: no top-k filter)"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling: the smallest set above this probability"})
    max_new_tokens: int = field(default=4096, metadata={"help": "the most tokens to write"})
    confidence: str = field(default="sampled", metadata={
        "help": "which tokens a pass commits first: sampled, the most probable under the distribution they were drawn "
                "from (SDAR's rule; with top-k 1 every token is certain, so a block fills left to right); model, "
                "the ones the model itself is surest of",
        "choices": ("sampled", "model")})
    given_prefix: bool = field(default=True, metadata={
        "help": "give the model the prompt template's answer prefix (how every reply it was trained on begins) "
                "instead of letting it write that"})
    prompt_template: str = field(default="", metadata={
        "help": "a prompt template JSON file to ask the model in; empty: the checkpoint's prompt_template.json, "
                "else the built-in one; built-in: always ours"})
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None
