"""One BiC-RL step on toy C++ tasks through the CPU harness: rewards, group advantages and a TraceRL update."""

from __future__ import annotations

import json

import pytest
import torch

from dice_lsp.harness import Options
from dice_lsp.train import rl
from dice_lsp.train.pack import IGNORE
from dice_lsp.train.rewards import group_advantages
from dice_lsp.train.trace import replay_piece

def test_replay_trains_each_commit_step_once():
    prompt, answer = [1, 2, 3, 4, 5, 6], [10, 11, 12, 13, 14, 15, 16]
    trace = [0, 2, 1, 0, 5, 3, 3]  # blocks (positions // 4): [4..7] holds 4 answer tokens, [8..11] the rest
    piece = replay_piece(prompt, answer, trace, 4, 99, 98, advantage=0.5)
    trained = piece.target != IGNORE
    assert sorted(piece.target[trained].tolist()) == sorted(answer)  # every token trained exactly once
    for copy in range(1, int(piece.copy.max()) + 1):
        rows = piece.copy == copy
        for token, target in zip(piece.input_ids[rows].tolist(), piece.target[rows].tolist()):
            if target != IGNORE:
                assert token == 99  # a trained token is masked in its round
    assert torch.allclose(piece.weight[trained], torch.tensor(1 / len(answer)))
    assert group_advantages([1.0, 1.0, 1.0]) is None
    assert group_advantages([1.0, 0.0]) == [1.0, -1.0]


@pytest.mark.slow
def test_one_rl_step_through_the_cpu_harness(tiny_model_dir, cpp_pair, tmp_path, monkeypatch):
    data = tmp_path / "tasks.jsonl"
    data.write_text(json.dumps({"reference": cpp_pair.reference, "level": 1}) + "\n")
    real = rl.rollouts
    seen = {}

    def rollouts_with_one_good_answer(run, config, prompts, seed):
        generations = real(run, config, prompts, seed)  # the engine's real rollouts, traces included
        good = run.tokenizer.encode(f"```python\n{cpp_pair.solution}```") + [run.model_config.stop_token_ids[-1]]
        first = generations[0]
        trace = [i // 2 for i in range(len(good))]  # two tokens committed per denoising step
        generations[0] = type(first)(token_ids=tuple(good), trace=tuple(trace), stop_reason="stop",
                                     text=run.tokenizer.decode(good, skip_special_tokens=True))
        seen["before"] = {k: v.detach().clone() for k, v in run.model.state_dict().items()}
        seen["traces"] = [g.trace for g in generations[1:]]
        return generations

    monkeypatch.setattr(rl, "rollouts", rollouts_with_one_good_answer)
    from dice_lsp.train.run import RunConfig

    summary = rl.train(
        RunConfig(model=str(tiny_model_dir), out=str(tmp_path / "rl"), lr=1e-3, progress=False, save_every=10),
        rl.RLConfig(data=str(data), stage="e2e", steps=1, tasks_per_step=1, group_size=3, max_new_tokens=16,
                    harness=Options(device="cpu", correctness_trials=1, baseline="none")),
    )
    last = summary["last"]
    assert last["updated"] and last["kept_groups"] == 1
    assert last["statuses"].get("correct") == 1, last["statuses"]
    assert abs(last["reward"] - 1 / 3) < 1e-6
    assert all(len(t) > 0 and min(t) >= 0 for t in seen["traces"])
    from dice_lsp.engine.checkpoint import load

    after = load(summary["final"], device="cpu").model.state_dict()
    assert any(not torch.equal(seen["before"][k], after[k]) for k in after)
