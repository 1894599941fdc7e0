"""`dice-lsp generate` end to end with the tiny model, and generate_kernel's turning of text into a solution and the
CPU threads it decodes on."""

from __future__ import annotations

import json

import pytest
import torch

from dice_lsp.engine import drafts
from dice_lsp.engine.checkpoint import load
from dice_lsp.cli import main
from dice_lsp.engine.generation import Generation
from tests.engine.test_prompts import GENERATED, PROBLEM, SKELETON


@pytest.fixture
def problem(tmp_path):
    path = tmp_path / "relu.py"
    path.write_text(PROBLEM)
    return path


def test_generate_json_samples(problem, tiny_model_dir, capsys):
    status = main(["generate", str(problem), "--model", str(tiny_model_dir), "--samples", "3", "--json",
                   "--temperature", "1", "--top-k", "0", "--seed", "1", "--max-new-tokens", "20"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["sample"] for line in lines] == [1, 2, 3]
    for line in lines:
        assert line["tokens"] == 20 and line["stop_reason"] == "length" and line["prompt_tokens"] > 100
        # A random model never ends the code block its given answer prefix opens: every sample is cut off, says so,
        # and the command fails.
        assert line["code"] is None and "cut off at --max-new-tokens 20" in line["note"]
    assert status == 1
    assert len({line["text"] for line in lines}) > 1, "samples are drawn independently"


def test_generate_infill_reads_the_linked_reference(tmp_path, problem, tiny_model_dir, capsys):
    skeleton = tmp_path / "relu_dice.py"
    skeleton.write_text("# dice: reference = relu.py\n" + SKELETON)
    status = main(["generate", str(skeleton), "--infill", "--model", str(tiny_model_dir), "--max-new-tokens", "8",
                   "--out", str(tmp_path / "out.py")])
    # The given answer prefix holds no CUDA source: the random model's text has none to splice in either.
    assert status == 1 and "sample 1: the generated code has no CUDA source" in capsys.readouterr().err
    assert not (tmp_path / "out.py").exists()


def test_generate_errors_are_one_line_with_the_fix(tmp_path, problem, tiny_model_dir, capsys, monkeypatch):
    monkeypatch.setenv("DICE_LSP_DEFAULT_MODEL", "none")  # as an install without the bundled model
    assert main(["generate", str(problem)]) == 2
    assert "huggingface-cli download DeadlyKitt3n/DICE-1.7B" in capsys.readouterr().err
    lonely = tmp_path / "skeleton.py"
    lonely.write_text(SKELETON)
    assert main(["generate", str(lonely), "--infill", "--model", str(tiny_model_dir)]) == 2
    assert "--reference" in capsys.readouterr().err
    assert main(["generate", str(problem), "--model", str(tmp_path / "missing")]) == 2
    assert "no checkpoint directory" in capsys.readouterr().err


def test_a_reply_with_code_becomes_a_spliced_solution():
    reply = Generation(token_ids=(1,), trace=(0,), stop_reason="stop", text=f"Sure.\n```python\n{GENERATED}```")
    draft = drafts.draft(reply, SKELETON)
    assert draft.code is not None and "relu_kernel" in draft.code and draft.code.endswith("relu.relu_cuda(x)\t\n")
    assert drafts.draft(reply, None).code == GENERATED


@pytest.mark.parametrize("small", [True, False])
def test_a_small_model_decodes_on_one_cpu_thread_and_torch_gets_its_threads_back(tiny_model_dir, monkeypatch, small):
    """On busy cores torch's threads made the bundled model's infill 16 times slower (drafts.ONE_THREAD_BELOW)."""
    if not small:
        monkeypatch.setattr(drafts, "ONE_THREAD_BELOW", 1)  # every model is large
    loaded = load(str(tiny_model_dir), device="cpu")
    seen: list[int] = []
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        drafts.generate_kernel(PROBLEM, loaded, max_new_tokens=8, seed=0,
                               on_block=lambda progress: seen.append(torch.get_num_threads()))
        after = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    assert seen and set(seen) == ({1} if small else {2})
    assert after == 2
