"""The shape of an SDAR (Qwen3 with block-causal attention) model, read from and written to HF's config.json.

`ModelConfig.from_hf` accepts upstream SDAR/DICE configs and plain Qwen3 ones; the latter load as `causal` models.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dice_lsp.engine.errors import EngineError

# DICE / SDAR-Chat defaults (Qwen3's tokenizer): <|endoftext|>, <|im_end|>, <|MASK|>.
ENDOFTEXT_ID = 151643
IM_END_ID = 151645
MASK_ID = 151669


@dataclass
class ModelConfig:
    vocab_size: int = 151936
    hidden_size: int = 2048
    intermediate_size: int = 6144
    num_hidden_layers: int = 28
    num_attention_heads: int = 16
    num_key_value_heads: int = 8
    head_dim: int = 128
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 32768
    block_size: int = 4  # block id = absolute position // block_size
    mask_token_id: int = MASK_ID
    eos_token_id: int = ENDOFTEXT_ID
    stop_token_ids: tuple[int, ...] = (ENDOFTEXT_ID, IM_END_ID)  # generation ends after any of these
    tie_word_embeddings: bool = False
    torch_dtype: str = "bfloat16"  # the dtype the weights were saved in
    # A plain causal LM (HF Qwen3ForCausalLM): same layers, but its logits are shifted (the logit at position i
    # predicts token i + 1), so it has no MASK token and decodes one token at a time (block_size 1).
    causal: bool = False
    extra: dict[str, Any] = field(default_factory=dict, repr=False)  # other config.json keys, written back unchanged

    def __post_init__(self) -> None:
        if self.num_attention_heads % self.num_key_value_heads:
            raise EngineError(
                f"config.json: num_attention_heads ({self.num_attention_heads}) is not a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        if self.block_size < 1:
            raise EngineError(f"config.json: block_size must be >= 1, got {self.block_size}")
        if self.causal and self.block_size != 1:
            raise EngineError(f"a causal LM decodes one token at a time: block_size must be 1, got {self.block_size}")
        self.stop_token_ids = tuple(dict.fromkeys(int(i) for i in self.stop_token_ids))

    @property
    def parameters(self) -> int:
        """Number of weights, counted from the shape (what the checkpoint holds)."""
        d, q, kv = self.hidden_size, self.num_attention_heads * self.head_dim, self.num_key_value_heads * self.head_dim
        layer = d * q + 2 * d * kv + q * d + 3 * d * self.intermediate_size + 2 * d + 2 * self.head_dim
        heads = 1 if self.tie_word_embeddings else 2
        return heads * self.vocab_size * d + self.num_hidden_layers * layer + d

    @classmethod
    def from_hf(cls, raw: dict[str, Any]) -> ModelConfig:
        """Read an HF config.json dict; a missing required key raises EngineError naming it."""
        required = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
        missing = [key for key in required if key not in raw]
        if missing:
            raise EngineError(f"config.json lacks {', '.join(missing)}: is this a Qwen3/SDAR checkpoint?")
        _refuse_unsupported(raw)
        heads = int(raw["num_attention_heads"])
        eos = raw.get("eos_token_id")
        eos = ENDOFTEXT_ID if eos is None else eos
        eos_ids = [int(i) for i in eos] if isinstance(eos, list) else [int(eos)]
        causal = is_causal(raw)
        known = {f for f in cls.__dataclass_fields__} | {"dtype", "architectures", "model_type"}
        return cls(
            vocab_size=int(raw["vocab_size"]),
            hidden_size=int(raw["hidden_size"]),
            intermediate_size=int(raw["intermediate_size"]),
            num_hidden_layers=int(raw["num_hidden_layers"]),
            num_attention_heads=heads,
            num_key_value_heads=int(raw.get("num_key_value_heads") or heads),
            head_dim=int(raw.get("head_dim") or raw["hidden_size"] // heads),
            rope_theta=float(raw.get("rope_theta") or (raw.get("rope_parameters") or {}).get("rope_theta", 1e6)),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            max_position_embeddings=int(raw.get("max_position_embeddings", 32768)),
            block_size=1 if causal else int(raw.get("block_size", 4)),
            mask_token_id=int(raw.get("mask_token_id", MASK_ID)),
            eos_token_id=eos_ids[0],
            stop_token_ids=tuple(raw.get("stop_token_ids", eos_ids)),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            torch_dtype=str(raw.get("torch_dtype") or raw.get("dtype") or "bfloat16"),
            causal=causal,
            extra={k: v for k, v in raw.items() if k not in known},
        )

    def to_hf(self) -> dict[str, Any]:
        """The config.json dict: Qwen3 keys plus SDAR's block_size and mask_token_id (a causal LM: plain Qwen3's,
        without those two, so that it loads as causal again)."""
        if self.causal:
            out: dict[str, Any] = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}
            skip = {"extra", "causal", "block_size", "mask_token_id"}
        else:
            out = {"architectures": ["SDARForCausalLM"], "model_type": "sdar"}
            skip = {"extra", "causal"}
        out.update(self.extra)
        for name in self.__dataclass_fields__:
            if name not in skip:
                value = getattr(self, name)
                out[name] = list(value) if isinstance(value, tuple) else value
        out["eos_token_id"] = self.eos_token_id
        return out


def is_causal(raw: dict[str, Any]) -> bool:
    """Whether an HF config.json describes a plain causal LM rather than an SDAR one. A MASK token means diffusion;
    otherwise naming plain Qwen3 (SDAR names SDARForCausalLM / sdar), or lacking SDAR's block_size, means causal."""
    if "mask_token_id" in raw:
        return False
    if "Qwen3ForCausalLM" in (raw.get("architectures") or []) or raw.get("model_type") == "qwen3":
        return True
    return "block_size" not in raw


def _refuse_unsupported(raw: dict[str, Any]) -> None:
    """Qwen3 variants the model does not implement would load and then decode garbage: say so instead."""
    problems = []
    if raw.get("attention_bias"):
        problems.append("attention_bias is true (q/k/v/o projections with bias)")
    if raw.get("use_sliding_window"):
        problems.append("use_sliding_window is true")
    if raw.get("hidden_act", "silu") != "silu":
        problems.append(f"hidden_act is {raw['hidden_act']!r}, not silu")
    rope = raw.get("rope_scaling") or raw.get("rope_parameters") or {}
    kind = rope.get("rope_type") or rope.get("type") or "default"
    if kind != "default":
        problems.append(f"RoPE scaling {kind!r}")
    if problems:
        raise EngineError(f"config.json: unsupported by the engine: {'; '.join(problems)}")


def read_json(path: Path) -> dict[str, Any] | None:
    """One of a checkpoint's JSON files (config.json, generation_config.json, tokenizer_config.json, the weights'
    index); None when the checkpoint has none, an EngineError naming the file when it cannot be read."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise EngineError(f"{path} is not valid JSON: {error}") from None
