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
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None
