"""SFT with LoRA (--lora-rank) on the tiny model: only the adapters train, the exported weights are the base plus
the merged adapters in the plain layout the engine loads, and a stopped run resumes to the same weights."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from dice_lsp.engine.checkpoint import load
from dice_lsp.engine.decode import generate
from dice_lsp.train import checkpoints
from dice_lsp.train.run import RunConfig
from dice_lsp.train.sft import SFTConfig, train

RANK, ALPHA = 4, 8.0


def lora_sft(model, data, out, steps, cutoff):
    return train(RunConfig(model=str(model), out=str(out), lr=1e-2, lora_rank=RANK, lora_alpha=ALPHA, save_every=2,
                           schedule="constant", progress=False),
                 SFTConfig(data=str(data), epochs=100, batch_size=2, cutoff=cutoff, kinds=("infill",),
                           max_steps=steps))


def test_lora_trains_adapters_only_merges_on_export_and_resumes(tiny_model_dir, toy_jsonl, toy_cutoff, toy_answer_loss,
                                                                tmp_path):
    cutoff = toy_cutoff("infill", 24)
    straight = lora_sft(tiny_model_dir, toy_jsonl, tmp_path / "straight", 4, cutoff)
    base = load_file(str(tiny_model_dir / "model.safetensors"))
    final = load_file(str(Path(straight["final"]) / "model.safetensors"))
    assert final.keys() == base.keys()  # plain SDAR names: no base_layer / lora_ entries

    # Every weight is the base's, except projections, which are the base plus B @ A * alpha / rank of the adapter
    # saved with the last checkpoint: so training moved nothing but the adapters.
    adapter = checkpoints.read_trainer(checkpoints.latest(tmp_path / "straight"), "adapter.safetensors")
    projections = 0
    for name, weight in base.items():
        stem = name.removesuffix(".weight")
        if f"{stem}.lora_A.default.weight" not in adapter:
            assert torch.equal(final[name], weight), name
            continue
        a, b = adapter[f"{stem}.lora_A.default.weight"], adapter[f"{stem}.lora_B.default.weight"]
        assert a.shape[0] == RANK and b.abs().max() > 0, name  # B starts at zero: it has trained
        torch.testing.assert_close(final[name], weight + b @ a * (ALPHA / RANK), atol=1e-6, rtol=1e-5)
        projections += 1
    assert projections == 7 * 2  # q, k, v, o, gate, up, down in each of the two layers

    # The merged export learned the infilling samples: its objective on them is below the base's (11.9 -> 9.6 when
    # written), and it decodes every position
    merged, base_loss = (toy_answer_loss(model, "infill", cutoff) for model in (straight["final"], tiny_model_dir))
    assert merged < 0.9 * base_loss, (merged, base_loss)
    loaded = load(straight["final"], device="cpu")
    [out] = generate(loaded.model, [[1, 2, 3, 4, 5]], max_new_tokens=8, seed=0)
    assert len(out.token_ids) == 8 or out.token_ids[-1] in loaded.config.stop_token_ids, out.token_ids
    assert loaded.config.mask_token_id not in out.token_ids

    stopped = lora_sft(tiny_model_dir, toy_jsonl, tmp_path / "resumed", 2, cutoff)
    assert stopped["resumed_from"] is None and stopped["steps"] == 2
    resumed = lora_sft(tiny_model_dir, toy_jsonl, tmp_path / "resumed", 4, cutoff)
    assert resumed["resumed_from"] and resumed["resumed_from"].endswith("step-0000002")
    again = load_file(str(Path(resumed["final"]) / "model.safetensors"))
    for name in final:
        torch.testing.assert_close(again[name], final[name], atol=0, rtol=0, msg=name)
