"""SFT runs end to end on the tiny model: the loss falls, the result decodes, and a killed run resumes exactly."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time

import pytest
import torch
from safetensors.torch import load_file

from dice_lsp.engine.checkpoint import load
from dice_lsp.engine.decode import generate
from dice_lsp.train.run import RunConfig
from dice_lsp.train.sft import SFTConfig, train


def test_loss_falls_and_the_result_loads_and_generates(tiny_model_dir, toy_jsonl, toy_cutoff, toy_answer_loss,
                                                       tmp_path):
    summary = train(RunConfig(model=str(tiny_model_dir), out=str(tmp_path / "run"), lr=3e-3, save_every=4,
                              schedule="constant", progress=False),
                    SFTConfig(data=str(toy_jsonl), epochs=100, batch_size=4, cutoff=toy_cutoff("e2e"), kinds=("e2e",),
                              max_steps=12))
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records]
    assert len(losses) == 12
    assert sum(losses[-3:]) / 3 < 0.8 * sum(losses[:3]) / 3
    assert (tmp_path / "run" / "loss.png").stat().st_size > 0
    # What was exported is what was trained: on the toy answers, the saved model's objective is well below the
    # base's (9.7 -> 5.9 when written), measured at the same noise.
    trained, base = (toy_answer_loss(model, "e2e", toy_cutoff("e2e")) for model in (summary["final"], tiny_model_dir))
    assert trained < 0.8 * base, (trained, base)
    loaded = load(summary["final"], device="cpu")
    [out] = generate(loaded.model, [[1, 2, 3, 4, 5]], max_new_tokens=8, seed=0)
    assert len(out.token_ids) == 8 or out.token_ids[-1] in loaded.config.stop_token_ids, out.token_ids
    assert loaded.config.mask_token_id not in out.token_ids  # every position was decoded


def test_killed_run_resumes_to_the_same_weights(sft_command, cli_env, tmp_path):
    env, steps = cli_env, 10
    straight = subprocess.run(sft_command(tmp_path / "straight", steps), env=env,
                              capture_output=True, text=True, timeout=300)
    assert straight.returncode == 0, straight.stderr[-2000:]

    killed_out = tmp_path / "killed"
    process = subprocess.Popen(sft_command(killed_out, steps), env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while time.time() < deadline and not (killed_out / "latest").exists():
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert (killed_out / "latest").exists() and not (killed_out / "final").exists(), "the run ended before the kill"

    resumed = subprocess.run(sft_command(killed_out, steps), env=env,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert '"resumed_from": ' in resumed.stdout and '"resumed_from": null' not in resumed.stdout
    a = load_file(str(tmp_path / "straight" / "final" / "model.safetensors"))
    b = load_file(str(killed_out / "final" / "model.safetensors"))
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    steps_logged = [json.loads(line)["step"] for line in (killed_out / "metrics.jsonl").read_text().splitlines()]
    assert steps_logged == list(range(1, steps + 1))


@pytest.mark.slow
def test_a_run_started_from_another_model_is_not_resumed_unless_asked(sft_command, cli_env, tiny_model_dir,
                                                                      tmp_path):
    """OUT holds checkpoints of a run from one model; the same --out with another --model is refused, naming both,
    before anything trains (it would have trained the old weights on, and rewritten run.json to name the new model).
    The same model written another way resumes; --no-resume starts over."""
    out, other = tmp_path / "run", tmp_path / "other-model"
    first = subprocess.run(sft_command(out, 2), env=cli_env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr[-2000:]
    shutil.copytree(tiny_model_dir, other)
    command = sft_command(out, 4)
    command[command.index("--model") + 1] = str(other)
    refused = subprocess.run(command, env=cli_env, capture_output=True, text=True)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert f"holds a run that started from the model {str(tiny_model_dir)!r}" in refused.stderr
    assert f"this command names {str(other)!r}" in refused.stderr and "--no-resume" in refused.stderr
    assert json.loads((out / "run.json").read_text())["model"] == str(tiny_model_dir)

    again = sft_command(out, 4)  # the same folder through a link: the same model
    (tmp_path / "link").symlink_to(tiny_model_dir)
    again[again.index("--model") + 1] = str(tmp_path / "link")
    resumed = subprocess.run(again, env=cli_env, capture_output=True, text=True)
    assert resumed.returncode == 0 and '"resumed_from": null' not in resumed.stdout, resumed.stderr[-2000:]
    fresh = subprocess.run([*command, "--no-resume"], env=cli_env, capture_output=True, text=True)
    assert fresh.returncode == 0 and '"resumed_from": null' in fresh.stdout, fresh.stderr[-2000:]
    # The checkpoints now hold the other model's run: the first model is refused in its turn (each checkpoint says
    # what it started from; run.json only what the last command asked)
    back = subprocess.run(sft_command(out, 6), env=cli_env, capture_output=True, text=True)
    assert back.returncode == 2 and f"started from the model {str(other)!r}" in back.stderr, back.stderr[-2000:]
