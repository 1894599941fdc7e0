"""The SDAR model against HF's Qwen3 and against its own block-causal definition."""

from __future__ import annotations

import pytest
import torch

from dice_lsp.engine.config import ModelConfig
from dice_lsp.engine.model import KVCache, SDARModel, block_causal_mask

SHAPE = dict(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=8, block_size=4)


def random_model(**overrides) -> SDARModel:
    torch.manual_seed(0)
    model = SDARModel(ModelConfig(**{**SHAPE, **overrides})).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(torch.rand_like(param) + 0.5 if "norm" in name else torch.randn_like(param) * 0.3)
    return model


def test_block_size_one_is_qwen3():
    """With one-token blocks the mask is causal: the logits must equal transformers' Qwen3ForCausalLM."""
    transformers = pytest.importorskip("transformers")
    model = random_model(block_size=1)
    c = model.config
    hf = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads, head_dim=c.head_dim, rope_theta=c.rope_theta,
        rms_norm_eps=c.rms_norm_eps, tie_word_embeddings=False)).eval()
    hf.load_state_dict(model.state_dict(), strict=True)
    ids = torch.randint(0, c.vocab_size, (2, 13))
    with torch.no_grad():
        torch.testing.assert_close(model(ids), hf(ids).logits, atol=1e-4, rtol=1e-4)


def test_state_dict_names_are_hf_names():
    names = set(random_model().state_dict())
    assert {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight",
            "model.layers.1.self_attn.q_norm.weight", "model.layers.0.mlp.gate_proj.weight"} <= names


def test_attention_is_bidirectional_inside_a_block_and_causal_across_blocks():
    model = random_model()
    ids = torch.randint(0, 97, (1, 12))
    with torch.no_grad():
        base = model(ids)
        later = ids.clone()
        later[0, 5] = (later[0, 5] + 1) % 97  # a token in block 1 (positions 4..7)
        changed = (model(later) - base).abs().amax(-1)[0]
    assert changed[:4].max() == 0, "block 0 must not see block 1"
    assert changed[4:8].min() > 0, "every position of block 1 sees the whole block"
    assert changed[8:].min() > 0, "block 2 sees block 1"


def test_default_mask_equals_explicit_block_causal_mask():
    model = random_model()
    ids = torch.randint(0, 97, (2, 10))
    index = torch.arange(10)
    with torch.no_grad():
        torch.testing.assert_close(model(ids), model(ids, index[None].expand(2, -1), block_causal_mask(index, index, 4)))


def test_cached_blocks_equal_one_full_pass():
    model = random_model()
    ids = torch.randint(0, 97, (1, 12))
    with torch.no_grad():
        full = model(ids)
        cache = KVCache(2)
        cache.write = True
        parts = [model(ids[:, i : i + 4], cache=cache) for i in (0, 4, 8)]
    torch.testing.assert_close(torch.cat(parts, 1), full, atol=1e-5, rtol=1e-5)


def test_gradient_checkpointing_gives_the_same_gradients():
    model = random_model().train()
    ids = torch.randint(0, 97, (2, 8))
    mask = torch.ones(16, 16, dtype=torch.bool).tril()  # a custom 2L mask, as training builds
    ids2, positions = torch.cat([ids, ids], 1), torch.arange(8).repeat(2)[None].expand(2, -1)

    def grads():
        model.zero_grad()
        model(ids2, positions, mask).float().pow(2).mean().backward()
        return [p.grad.clone() for p in model.parameters()]

    plain = grads()
    model.gradient_checkpointing = True
    for a, b in zip(plain, grads()):
        torch.testing.assert_close(a, b)
