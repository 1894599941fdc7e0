"""Block-diffusion decoding checked token for token against a naive decoder that recomputes everything each pass."""

from __future__ import annotations

import math

import pytest
import torch

from dice_lsp.settings import Decoding
from dice_lsp.engine.checkpoint import load
from dice_lsp.engine.decode import CacheRunner, generate
from dice_lsp.engine.errors import EngineError


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return load(str(tiny_model_dir), device="cpu")  # the naive decoder below builds its inputs on the CPU


@pytest.fixture(scope="module")
def prompt(tiny):
    ids = tiny.tokenizer.encode("<|im_start|>user\nWrite a relu kernel<|im_end|>\n<|im_start|>assistant\n")
    # A length of 2 mod 4, whatever the tokenizer: the first generated block (of 4 or 8) also holds the prompt's
    # tail, and 30 new tokens end on a block boundary.
    return ids[(len(ids) - 2) % 4:]


def naive_decode(model, prompt, block_size, steps, max_new, threshold=None):
    """Greedy SDAR decoding the slow, obvious way: every pass runs the model over the whole sequence so far
    (earlier blocks final, the current block partly masked) with a block-causal mask built here."""
    mask_id = model.config.mask_token_id
    total = math.ceil((len(prompt) + max_new) / block_size) * block_size
    canvas = list(prompt) + [mask_id] * (total - len(prompt))
    trace = {}
    step = 0
    for lo in range(len(prompt) // block_size * block_size, total, block_size):
        hi = lo + block_size
        masked = [p for p in range(lo, hi) if p >= len(prompt)]
        counts = [len(masked) // steps + (i < len(masked) % steps) for i in range(steps)]
        for count in counts:
            if threshold is None and count == 0:
                continue
            if not masked:
                break
            blocks = torch.arange(hi) // block_size
            visible = blocks[None, :] <= blocks[:, None]  # query row, key column
            with torch.no_grad():
                probs = model(torch.tensor([canvas[:hi]]), None, visible)[0, lo:hi].float().softmax(-1)
            confidence, token = probs.max(-1)
            ranked = sorted(masked, key=lambda p: (-confidence[p - lo].item(), p))
            chosen = set(ranked[:count])
            if threshold is not None:
                chosen |= {p for p in masked if confidence[p - lo].item() > threshold}
            for p in chosen:
                canvas[p], trace[p] = token[p - lo].item(), step
            masked = [p for p in masked if p not in chosen]
            step += 1
    new = range(len(prompt), len(prompt) + max_new)
    return [canvas[p] for p in new], [trace[p] for p in new]


@pytest.mark.parametrize("block_size,steps", [(4, 4), (4, 2), (8, 3), (1, 1)])
def test_static_decoding_equals_naive_decoder(tiny, prompt, block_size, steps):
    assert len(prompt) % block_size or block_size == 1  # the first block also holds the prompt's tail
    tokens, trace = naive_decode(tiny.model, prompt, block_size, steps, 26)
    (g,) = generate(tiny.model, [prompt], None, block_size=block_size, steps=steps, temperature=0,
                    max_new_tokens=26, stop_token_ids=())
    assert list(g.token_ids) == tokens
    assert list(g.trace) == trace
    assert g.stop_reason == "length"


def test_dynamic_decoding_equals_naive_decoder(tiny, prompt):
    tokens, trace = naive_decode(tiny.model, prompt, 4, 4, 40, threshold=0.12)
    (g,) = generate(tiny.model, [prompt], None, strategy="dynamic", threshold=0.12, temperature=0,
                    max_new_tokens=40, stop_token_ids=())
    assert (list(g.token_ids), list(g.trace)) == (tokens, trace)
    per_step = [g.trace.count(s) for s in set(g.trace)]
    assert max(per_step) > 1, "some pass must commit several tokens (else this test checks nothing dynamic)"
    assert g.steps < 40, "dynamic decoding needs fewer passes than tokens here"


def test_static_commits_one_token_per_pass_and_every_block_after_the_previous(tiny, prompt):
    (g,) = generate(tiny.model, [prompt], None, temperature=0, max_new_tokens=30, stop_token_ids=())
    assert sorted(g.trace) == list(range(30))
    offset = len(prompt) % 4
    blocks = [g.trace[max(0, i - offset) : i + 4 - offset] for i in range(0, 30 + offset, 4)]
    for earlier, later in zip(blocks, blocks[1:]):
        assert max(earlier) < min(later)
    # Prefill once, then one pass per masked token (whole blocks are decoded): a block's K/V is written by the next
    # block's first pass, and the last block's is never needed.
    blocks = math.ceil((30 + offset) / 4)
    assert g.steps == blocks * 4 - offset
    assert g.forwards == 1 + g.steps


def test_a_runner_without_fused_writes_writes_each_block_on_its_own(tiny, prompt):
    args = dict(temperature=0, max_new_tokens=30, stop_token_ids=())
    (fused,) = generate(tiny.model, [prompt], None, **args)
    (separate,) = generate(tiny.model, [prompt], None, runner=CacheRunner(tiny.model, fused_writes=False), **args)
    assert (separate.token_ids, separate.trace) == (fused.token_ids, fused.trace)
    blocks = math.ceil((30 + len(prompt) % 4) / 4)
    assert separate.forwards == fused.forwards + blocks - 1  # every block's write but the last's
    many = generate(tiny.model, [prompt] * 9, None, **args)  # 9 x 2 blocks x 4 rows: past FUSED_PASS_ROWS
    assert many[0].forwards == separate.forwards and many[0].token_ids == fused.token_ids


def test_batched_equals_single(tiny, prompt):
    args = dict(temperature=0, max_new_tokens=21, stop_token_ids=())
    prompts = [prompt, prompt[:9], prompt[:2], prompt]
    singles = [generate(tiny.model, [p], None, **args)[0] for p in prompts]
    batched = generate(tiny.model, prompts, None, **args)
    assert [b.token_ids for b in batched] == [s.token_ids for s in singles]
    same = generate(tiny.model, [prompt] * 3, None, **args)
    assert all(g.token_ids == singles[0].token_ids and g.trace == singles[0].trace for g in same)


def test_stop_token_ends_the_sample_and_decoding(tiny, prompt):
    (free,) = generate(tiny.model, [prompt], None, temperature=0, max_new_tokens=60, stop_token_ids=())
    k = next(i for i in range(6, 60) if free.token_ids[i] not in free.token_ids[:i])
    stop = free.token_ids[k]
    (g,) = generate(tiny.model, [prompt], None, temperature=0, max_new_tokens=60, stop_token_ids=(stop,))
    assert g.token_ids == free.token_ids[: k + 1], "keep the stop token, drop what follows"
    assert g.stop_reason == "stop"
    assert g.forwards < free.forwards, "decoding ends at the block holding the stop token"


def test_each_sample_stops_on_its_own(tiny, prompt):
    short = prompt[:5]
    a = generate(tiny.model, [prompt], None, temperature=0, max_new_tokens=40, stop_token_ids=())[0]
    b = generate(tiny.model, [short], None, temperature=0, max_new_tokens=40, stop_token_ids=())[0]
    stop = next(t for t in a.token_ids[4:] if t not in b.token_ids)
    both = generate(tiny.model, [prompt, short], None, temperature=0, max_new_tokens=40, stop_token_ids=(stop,))
    assert both[0].stop_reason == "stop" and both[0].token_ids[-1] == stop
    assert both[1].stop_reason == "length" and both[1].token_ids == b.token_ids


def test_max_new_tokens_is_exact_when_not_a_block_multiple(tiny, prompt):
    (g,) = generate(tiny.model, [prompt], None, temperature=0, max_new_tokens=7, stop_token_ids=())
    assert len(g.token_ids) == len(g.trace) == 7 and g.stop_reason == "length"


def test_progress_per_block_and_cancellation(tiny, prompt):
    events = []
    (g,) = generate(tiny.model, [prompt], None, temperature=0, max_new_tokens=16, stop_token_ids=(),
                    on_block=events.append, tokenizer=tiny.tokenizer)
    assert [e.blocks for e in events] == list(range(1, len(events) + 1))
    assert events[-1].tokens == (16,) and events[-1].finished == 1
    assert events[-1].preview == g.text and g.text
    calls = []
    (c,) = generate(tiny.model, [prompt], None, temperature=0, max_new_tokens=16, stop_token_ids=(),
                    cancel=lambda: len(calls) > 0, on_block=calls.append)
    assert c.stop_reason == "cancelled" and len(calls) == 1
    assert c.token_ids == g.token_ids[: len(c.token_ids)] and 0 < len(c.token_ids) < 16


def test_sampling_is_reproducible_with_a_seed(tiny, prompt):
    args = dict(temperature=1.0, top_k=0, max_new_tokens=24, stop_token_ids=())
    a = generate(tiny.model, [prompt] * 2, None, seed=7, **args)
    b = generate(tiny.model, [prompt] * 2, None, seed=7, **args)
    c = generate(tiny.model, [prompt] * 2, None, seed=8, **args)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert a[0].token_ids != a[1].token_ids or a[0].token_ids != c[0].token_ids


def test_tiny_top_p_equals_top_k_one(tiny, prompt):
    """Both leave one token per position, so confidence is 1 everywhere and static decoding goes left to right."""
    args = dict(temperature=1.0, max_new_tokens=12, stop_token_ids=())
    nucleus = generate(tiny.model, [prompt], None, top_k=0, top_p=1e-6, seed=1, **args)[0]
    top1 = generate(tiny.model, [prompt], None, top_k=1, **args)[0]
    assert top1.trace == tuple(range(12))
    assert (nucleus.token_ids, nucleus.trace) == (top1.token_ids, top1.trace)


def test_model_confidence_ranks_a_top_k_one_block_by_the_models_probabilities(tiny, prompt):
    """SDAR's rule sees every top-k-1 token as certain and fills a block left to right; confidence "model" commits
    the token the model is surest of first, as the naive decoder (which ranks by probability) does."""
    args = dict(temperature=1.0, top_k=1, max_new_tokens=26, stop_token_ids=())
    tokens, trace = naive_decode(tiny.model, prompt, 4, 4, 26)
    (model,) = generate(tiny.model, [prompt], None, confidence="model", **args)
    (sdar,) = generate(tiny.model, [prompt], None, **args)
    assert (list(model.token_ids), list(model.trace)) == (tokens, trace)
    assert sdar.trace == tuple(range(26)) and model.trace != sdar.trace, "the orders must differ to test anything"
    with pytest.raises(EngineError, match="confidence must be sampled or model"):
        generate(tiny.model, [prompt], None, confidence="best")


def test_settings_object_and_bad_settings(tiny, prompt):
    g = generate(tiny.model, [prompt], Decoding(max_new_tokens=5), stop_token_ids=())[0]
    assert len(g.token_ids) == 5
    with pytest.raises(EngineError, match="strategy"):
        generate(tiny.model, [prompt], Decoding(strategy="greedy"))
    with pytest.raises(EngineError, match="empty prompt"):
        generate(tiny.model, [[]], None)
