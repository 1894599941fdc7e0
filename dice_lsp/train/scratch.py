"""A new SDAR model from scratch: a tokenizer learned from a training JSONL's prompts and answers, and random
weights of a chosen shape, saved as a checkpoint that `dice-lsp train sft` starts from (how the default is made)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from dice_lsp.engine import prompts
from dice_lsp.engine.checkpoint import save
from dice_lsp.engine.config import ModelConfig
from dice_lsp.engine.model import SDARModel
from dice_lsp.engine.tokenizer import CHAT_TEMPLATE, SPECIAL_TOKENS, train
from dice_lsp.train.data import Pair, answer_ids, answer_text, end_of_turn, prompt_messages, read_pairs
from dice_lsp.train.errors import TrainError


@dataclass(frozen=True)
class Shape:
    """The model's size. The defaults are the bundled model's: 15.7 M weights, 31 MB in bf16."""

    vocab_size: int = 4096
    hidden_size: int = 384
    layers: int = 8
    heads: int = 6
    kv_heads: int = 2
    head_dim: int = 64
    intermediate_size: int = 1024
    block_size: int = 4  # DICE's
    max_positions: int = 4096
    rope_theta: float = 10_000.0

    def problems(self) -> list[str]:
        found = []
        if min(self.hidden_size, self.layers, self.heads, self.kv_heads, self.head_dim, self.intermediate_size,
               self.block_size, self.max_positions) < 1:
            found.append("every size must be at least 1")
        elif self.heads % self.kv_heads:
            found.append(f"--heads ({self.heads}) must be a multiple of --kv-heads ({self.kv_heads})")
        if self.head_dim % 2:
            found.append(f"--head-dim must be even for rotary embeddings, got {self.head_dim}")
        if self.max_positions % self.block_size:
            found.append(f"--max-positions must be a multiple of --block-size ({self.block_size})")
        return found


def texts(pairs: list[Pair], limit: int) -> list[str]:
    """What the tokenizer learns from: for up to `limit` pairs spread over the file, the rendered end-to-end and
    infilling prompts and the answer, exactly as training and serving will tokenize them."""
    step = max(1, len(pairs) // max(1, limit))
    chosen = pairs[::step][:limit]
    found = []
    for pair in chosen:
        for kind in ("e2e", "infill"):
            messages = prompt_messages(pair, kind)
            if messages is not None:
                found.append(prompts.render(messages, CHAT_TEMPLATE))
        found.append(answer_text(pair.solution or ""))
    return found


def config_for(shape: Shape, tokenizer) -> ModelConfig:
    ids = {token: tokenizer.token_id(token) for token in SPECIAL_TOKENS}
    return ModelConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=shape.hidden_size, intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
        head_dim=shape.head_dim, rope_theta=shape.rope_theta, max_position_embeddings=shape.max_positions,
        block_size=shape.block_size, mask_token_id=ids["<|MASK|>"], eos_token_id=ids["<|endoftext|>"],
        stop_token_ids=(ids["<|endoftext|>"], ids["<|im_end|>"]), torch_dtype="bfloat16",
    )


def new_model(data, out, shape: Shape = Shape(), seed: int = 0, tokenizer_pairs: int = 4000) -> dict:
    """Train the tokenizer on `data`, write random weights of `shape` (bf16) to `out`; returns a summary."""
    problems = shape.problems()
    if problems:
        raise TrainError("; ".join(problems))
    pairs = read_pairs(data)
    tokenizer = train(texts(pairs, tokenizer_pairs), shape.vocab_size, shape.max_positions)
    config = config_for(shape, tokenizer)
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = SDARModel(config)
    finally:
        torch.random.set_rng_state(state)
    model.to(torch.bfloat16)
    path = save(model, tokenizer, Path(out))
    lengths = _lengths(tokenizer, config, pairs[: min(len(pairs), 200)])
    return {"path": str(path), "parameters": config.parameters, "megabytes": round(config.parameters * 2 / 1e6, 1),
            "vocab_size": tokenizer.vocab_size, **lengths}


def _lengths(tokenizer, config: ModelConfig, pairs: list[Pair]) -> dict:
    """Token counts of a few samples, so the user can choose --cutoff for `train sft`."""
    end = end_of_turn(tokenizer, config)
    prompt = [len(tokenizer.encode(prompts.render(prompts.end_to_end_prompt(p.reference), CHAT_TEMPLATE)))
              for p in pairs]
    answer = [len(answer_ids(tokenizer, p.solution or "", end)) for p in pairs]
    total = sorted(a + b for a, b in zip(prompt, answer))
    return {"e2e_tokens_median": total[len(total) // 2], "e2e_tokens_max": total[-1]}
