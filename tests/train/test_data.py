"""Training data is asked the way the engine serves: SFT prompt tokens (and the answer's given beginning) equal what
generate_kernel feeds the model, and the answer is what the engine takes back out (extracted, and for infilling spliced into the skeleton)."""

from __future__ import annotations

import pytest

from dice_lsp import engine
from dice_lsp.engine import drafts, prompts
from dice_lsp.engine.generation import Generation
from dice_lsp.train.data import read_pairs, sft_samples
from dice_lsp.train.errors import TrainError


def served_prompt_ids(loaded, reference, monkeypatch, skeleton=None) -> list[int]:
    """The prompt tokens generate_kernel hands to decoding for `reference` (and `skeleton` when infilling)."""
    fed = []

    def record(model, prompt_ids, *args, **kwargs):
        fed.extend(prompt_ids)
        return [Generation(token_ids=(), trace=(), stop_reason="length") for _ in prompt_ids]

    monkeypatch.setattr(drafts, "generate", record)  # the decoding that generate_kernel calls
    engine.generate_kernel(reference, loaded, samples=1, infill_skeleton=skeleton)
    assert len(fed) == 1
    return list(fed[0])


def test_sft_prompts_are_the_served_prompts(tiny_model_dir, toy_jsonl, monkeypatch):
    loaded = engine.load(str(tiny_model_dir), device="cpu")
    assert loaded.chat_template  # the tiny checkpoint carries Qwen3's layout as its own template
    pairs = read_pairs(toy_jsonl)
    samples, skipped = sft_samples(loaded.tokenizer, loaded.config, pairs)
    assert not skipped and len(samples) == 2 * len(pairs)
    for sample in samples:
        pair = pairs[sample.pair]
        skeleton = pair.solution if sample.kind == "infill" else None
        served = served_prompt_ids(loaded, pair.reference, monkeypatch, skeleton)
        prompt = list(sample.prompt_ids)
        # Serving asks with the training prompt, then hands decoding the answer's fixed beginning (the template's
        # answer prefix, dice.decoding.givenPrefix): exactly the first tokens of the training answer
        given = served[len(prompt):]
        assert served[:len(prompt)] == prompt and given and given == list(sample.answer_ids[:len(given)])
        # The answer is what serving extracts; infilling's answer spliced into its skeleton gives the solution.
        answer = loaded.tokenizer.decode(sample.answer_ids, skip_special_tokens=True)
        code = prompts.extract_code(answer)
        assert code == pair.solution.strip() + "\n"
        if skeleton is not None:
            assert prompts.splice(skeleton, code) == pair.solution


def test_unknown_kind_and_missing_core(tiny_model_dir, tmp_path):
    loaded = engine.load(str(tiny_model_dir), device="cpu")
    data = tmp_path / "pairs.jsonl"
    data.write_text('{"reference": "class Model: pass\\n", "solution": "class ModelNew: pass\\n"}\n')
    pairs = read_pairs(data)
    samples, skipped = sft_samples(loaded.tokenizer, loaded.config, pairs)
    assert [s.kind for s in samples] == ["e2e"] and skipped == {"infill: no prefix/core/suffix split": 1}
    with pytest.raises(TrainError, match="unknown sample kind e2e2"):
        sft_samples(loaded.tokenizer, loaded.config, pairs, kinds=("e2e2",))
