"""What decoding returns: a `Generation` per sample (tokens, text, commit trace, why it stopped, timing),
a `DecodeProgress` event per committed block, and a `Draft` (a generation turned into a kernel file)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Generation:
    token_ids: tuple[int, ...]  # the generated tokens, the stop token included, nothing after it
    trace: tuple[int, ...]  # per generated token: the global denoising step (0-based) that committed it
    stop_reason: str  # "stop" (a stop token), "length" (max_new_tokens) or "cancelled"
    text: str = ""  # token_ids decoded without special tokens ("" when no tokenizer was given)
    prompt_tokens: int = 0
    steps: int = 0  # denoising passes the batch ran
    forwards: int = 0  # model forwards the batch ran: the prefill, then denoising passes (a block's first also writes
    # the K/V of the block before it)
    seconds: float = 0.0  # wall time of the whole batch

    @property
    def tokens_per_second(self) -> float:
        return len(self.token_ids) / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class DecodeProgress:
    """Sent after each committed block."""

    blocks: int  # blocks committed so far
    tokens: tuple[int, ...]  # generated tokens so far, per sample
    finished: int  # samples that have stopped
    seconds: float
    preview: str = ""  # the tail of sample 0's text, when a tokenizer was given


@dataclass(frozen=True)
class Draft:
    """One sample made into a kernel file."""

    generation: Generation
    code: str | None  # the solution file, or None when the output held no usable code (see `note`)
    note: str = ""  # why `code` is None, or what was done to obtain it
