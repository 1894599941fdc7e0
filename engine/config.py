"""The shape of an SDAR (Qwen3 with block-causal attention) model, read from and written to HF's config.json.

`ModelConfig.from_hf` accepts the keys of upstream SDAR/DICE configs and of plain Qwen3 configs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.errors import EngineError

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
    extra: dict[str, Any] = field(default_factory=dict, repr=False)  # other config.json keys, written back unchanged

    def __post_init__(self) -> None:
        if self.num_attention_heads % self.num_key_value_heads:
            raise EngineError(
                f"config.json: num_attention_heads ({self.num_attention_heads}) is not a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        if self.block_size < 1:
            raise EngineError(f"config.json: block_size must be >= 1, got {self.block_size}")
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
        heads = int(raw["num_attention_heads"])
        eos = raw.get("eos_token_id", ENDOFTEXT_ID)
        eos_ids = [int(i) for i in eos] if isinstance(eos, list) else [int(eos)]
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
            block_size=int(raw.get("block_size", 4)),
            mask_token_id=int(raw.get("mask_token_id", MASK_ID)),
            eos_token_id=eos_ids[0],
            stop_token_ids=tuple(raw.get("stop_token_ids", eos_ids)),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            torch_dtype=str(raw.get("torch_dtype") or raw.get("dtype") or "bfloat16"),
            extra={k: v for k, v in raw.items() if k not in known},
        )

    def to_hf(self) -> dict[str, Any]:
        """The config.json dict: Qwen3 keys plus SDAR's block_size and mask_token_id."""
        out: dict[str, Any] = {"architectures": ["SDARForCausalLM"], "model_type": "sdar"}
        out.update(self.extra)
        for name in self.__dataclass_fields__:
            if name != "extra":
                value = getattr(self, name)
                out[name] = list(value) if isinstance(value, tuple) else value
        out["eos_token_id"] = self.eos_token_id
        return out
