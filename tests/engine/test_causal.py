"""A plain Qwen3 causal LM saved by transformers loads in the engine and decodes, greedily, exactly the tokens of
HF's own generate(): block size 1, one step, shifted logits, through the same `generate`."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from dice_lsp.engine.checkpoint import load, save
from dice_lsp.engine.config import ModelConfig
from dice_lsp.engine.decode import generate
from dice_lsp.engine.errors import EngineError
from tiny_model import train_tokenizer

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    """(HF model, directory): a tiny random Qwen3ForCausalLM written by save_pretrained, plus our tokenizer."""
    tokenizer = train_tokenizer()
    config = transformers.Qwen3Config(
        vocab_size=tokenizer.vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
        tie_word_embeddings=False, eos_token_id=tokenizer.token_id("<|endoftext|>"),
        pad_token_id=tokenizer.token_id("<|endoftext|>"),
    )
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(0)
        hf = transformers.Qwen3ForCausalLM(config)
        # Larger than the 0.02 init, so that the random model's next-token choices are clear-cut (no near ties
        # that rounding differences between two implementations could flip) and vary along the sequence.
        with torch.no_grad():
            for name, param in hf.named_parameters():
                if "norm" not in name:
                    param.normal_(0.0, 0.25 if "embed" in name or "lm_head" in name else 0.12)
    finally:
        torch.random.set_rng_state(state)
    hf.eval()
    directory = tmp_path_factory.mktemp("qwen3") / "tiny-qwen3"
    hf.save_pretrained(directory)
    tokenizer.save(directory)
    return hf, directory


@pytest.fixture(scope="module")
def loaded(qwen3):
    return load(str(qwen3[1]))


@pytest.fixture(scope="module")
def prompts(loaded):
    text = "<|im_start|>user\nWrite a relu kernel for x of shape (batch_size, dim)<|im_end|>\n<|im_start|>assistant\n"
    ids = loaded.tokenizer.encode(text)
    return [ids, ids[:7], ids[3:20], ids[:1]]


def hf_greedy(hf, prompts, max_new, stop):
    """HF generate(do_sample=False), batched with left padding; per row the new tokens up to the first stop."""
    width = max(len(p) for p in prompts)
    pad = hf.config.pad_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts])
    attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.inference_mode():
        out = hf.generate(ids, attention_mask=attention, max_new_tokens=max_new, do_sample=False,
                          eos_token_id=list(stop) or None, pad_token_id=pad)
    rows = []
    for row in out[:, width:].tolist():
        end = next((k + 1 for k, t in enumerate(row) if t in stop), len(row))
        rows.append(row[:end])
    return rows


def test_qwen3_config_loads_as_causal(loaded, qwen3, tiny_model_dir):
    assert loaded.config.causal and loaded.config.block_size == 1
    assert not load(str(tiny_model_dir)).config.causal  # SDAR stays SDAR
    raw = json.loads((qwen3[1] / "config.json").read_text())
    assert "Qwen3ForCausalLM" in raw["architectures"] and "mask_token_id" not in raw


def test_greedy_equals_hf_generate_single(loaded, qwen3, prompts):
    for prompt in prompts[:2]:
        (expected,) = hf_greedy(qwen3[0], [prompt], 24, ())
        (g,) = generate(loaded.model, [prompt], None, temperature=0, max_new_tokens=24, stop_token_ids=())
        assert list(g.token_ids) == expected
        assert g.trace == tuple(range(24)) and g.stop_reason == "length"
        assert g.forwards == (1 if len(prompt) > 1 else 0) + 24  # prefill, then one pass per token


def test_greedy_equals_hf_generate_batched(loaded, qwen3, prompts):
    expected = hf_greedy(qwen3[0], prompts, 20, ())
    batched = generate(loaded.model, prompts, None, top_k=1, max_new_tokens=20, stop_token_ids=())
    assert [list(g.token_ids) for g in batched] == expected
    assert len(set(map(tuple, expected))) > 1, "different prompts should continue differently"


@pytest.mark.parametrize("case", ["some stop", "all stop"])
def test_stop_tokens_end_each_sample_as_hf_does(loaded, qwen3, prompts, case):
    free = hf_greedy(qwen3[0], prompts[:3], 30, ())
    if case == "some stop":  # samples 0 and 1 stop, at different lengths; sample 2 runs to the length limit
        stop = (next(t for t in free[1][3:] if t in free[0] and t not in free[2]),)
    else:  # every sample stops early: decoding must end there, not at the limit
        stop = tuple({row[5] for row in free})
    expected = hf_greedy(qwen3[0], prompts[:3], 30, stop)
    assert [len(row) < 30 for row in expected] == ([True, True, False] if case == "some stop" else [True] * 3)
    events = []
    out = generate(loaded.model, prompts[:3], None, temperature=0, max_new_tokens=30, stop_token_ids=stop,
                   on_block=events.append, tokenizer=loaded.tokenizer)
    assert [list(g.token_ids) for g in out] == expected
    for g, row in zip(out, expected):
        assert g.stop_reason == ("stop" if row[-1] in stop else "length")
        assert g.trace == tuple(range(len(row)))
    assert [e.blocks for e in events] == list(range(1, len(events) + 1))  # one event per token
    assert len(events) == max(len(row) for row in expected) == out[0].steps
    assert events[-1].finished == 3 and events[-1].preview == out[0].text


def test_cancel_and_seeded_sampling(loaded, prompts):
    calls = []
    (c,) = generate(loaded.model, [prompts[0]], None, temperature=0, max_new_tokens=16, stop_token_ids=(),
                    cancel=lambda: len(calls) >= 5, on_block=calls.append)
    assert c.stop_reason == "cancelled" and len(c.token_ids) == 5
    args = dict(temperature=1.0, top_k=0, max_new_tokens=16, stop_token_ids=())
    a = generate(loaded.model, [prompts[0]] * 2, None, seed=3, **args)
    b = generate(loaded.model, [prompts[0]] * 2, None, seed=3, **args)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]


def test_block_size_other_than_one_is_refused(loaded, prompts):
    with pytest.raises(EngineError, match="causal LM"):
        generate(loaded.model, [prompts[0]], None, block_size=4)


def test_causal_checkpoint_saves_and_loads_as_causal(loaded, prompts, tmp_path):
    again = load(str(save(loaded.model, loaded, tmp_path / "copy")))
    assert again.config.causal
    args = dict(temperature=0, max_new_tokens=8, stop_token_ids=())
    assert generate(again.model, [prompts[0]], None, **args)[0].token_ids == \
        generate(loaded.model, [prompts[0]], None, **args)[0].token_ids


def test_unsupported_qwen3_variants_are_named(qwen3, tmp_path):
    directory = tmp_path / "biased"
    shutil.copytree(qwen3[1], directory)
    raw = json.loads((directory / "config.json").read_text())
    raw.update(attention_bias=True, rope_parameters={"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0})
    (directory / "config.json").write_text(json.dumps(raw))
    with pytest.raises(EngineError, match="attention_bias.*yarn"):
        load(str(directory))


def test_config_keys_decide_causal():
    base = dict(vocab_size=8, hidden_size=4, intermediate_size=8, num_hidden_layers=1, num_attention_heads=1)
    assert ModelConfig.from_hf(base).causal
    assert not ModelConfig.from_hf(dict(base, block_size=4)).causal
    assert not ModelConfig.from_hf(dict(base, mask_token_id=7, architectures=["SDARForCausalLM"])).causal
    assert ModelConfig.from_hf(dict(base, block_size=4, architectures=["Qwen3ForCausalLM"])).block_size == 1
