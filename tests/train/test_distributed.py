"""The same `dice-lsp train sft` under torchrun: 2 processes (gloo on CPU, DDP or FSDP) train exactly as 1 process
with the same global batch, and their checkpoints resume (DDP's in 1 process; FSDP's in as many ranks as wrote it)."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch
from safetensors.torch import load_file

pytestmark = pytest.mark.slow

BATCH, STEPS = 4, 4  # 4 samples per optimizer step over all ranks: 2 per rank with 2 processes


def run(command, env, expect=0) -> subprocess.CompletedProcess:
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == expect, result.stderr[-3000:]
    return result


def records(out) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def assert_same_curve(got: list[dict], want: list[dict]) -> None:
    """Same steps, same global batch (answer and masked tokens), loss and gradient norm equal to float tolerance."""
    assert [r["step"] for r in got] == [r["step"] for r in want]
    for a, b in zip(got, want):
        assert (a["answer_tokens"], a["masked_tokens"]) == (b["answer_tokens"], b["masked_tokens"]), a["step"]
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5), a["step"]
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4), a["step"]


def assert_same_weights(a_dir, b_dir) -> None:
    a, b = load_file(str(a_dir / "model.safetensors")), load_file(str(b_dir / "model.safetensors"))
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=1e-5, rtol=1e-4, msg=name)


@pytest.fixture(scope="module")
def one_process(sft_command, cli_env, tmp_path_factory):
    """The reference: STEPS steps in one process."""
    out = tmp_path_factory.mktemp("one-process")
    run(sft_command(out, STEPS, batch_size=BATCH), cli_env)
    return out


def test_two_ddp_processes_train_as_one_and_resume_in_one(one_process, sft_command, cli_env, tmp_path):
    out = tmp_path / "ddp"
    run(sft_command(out, STEPS // 2, processes=2, batch_size=BATCH), cli_env)
    assert json.loads((out / "checkpoints" / "step-0000002" / "trainer" / "state.json").read_text())["world_size"] == 2
    assert_same_curve(records(out), records(one_process)[: STEPS // 2])

    resumed = run(sft_command(out, STEPS, batch_size=BATCH), cli_env)  # one process takes over
    assert json.loads(resumed.stdout)["resumed_from"].endswith("step-0000002")
    assert_same_curve(records(out), records(one_process))
    assert_same_weights(out / "final", one_process / "final")


def test_two_fsdp_processes_train_as_one_and_resume_in_two(one_process, sft_command, cli_env, tmp_path):
    out = tmp_path / "fsdp"
    run(sft_command(out, STEPS // 2, "--fsdp", processes=2, batch_size=BATCH), cli_env)
    assert_same_curve(records(out), records(one_process)[: STEPS // 2])
    assert_same_weights(out / "final", out / "checkpoints" / "step-0000002")  # gathered, not one rank's shard

    refused = run(sft_command(out, STEPS, "--fsdp", batch_size=BATCH), cli_env, expect=2)
    assert "written by 2 FSDP ranks; resume with as many" in refused.stderr

    resumed = run(sft_command(out, STEPS, "--fsdp", processes=2, batch_size=BATCH), cli_env)
    assert '"resumed_from": null' not in resumed.stdout
    assert_same_curve(records(out), records(one_process))
    assert_same_weights(out / "final", one_process / "final")
