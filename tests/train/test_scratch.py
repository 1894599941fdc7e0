"""`dice-lsp train init` makes a model from scratch that the engine loads and `train sft` trains, and
`--time-limit` ends a run on time with its learning rate decayed."""

from __future__ import annotations

import json
import shutil

import pytest

from dice_lsp.cli import main
from dice_lsp.engine import prompts
from dice_lsp.engine.checkpoint import load
from dice_lsp.engine.decode import generate
from dice_lsp.train.data import read_pairs
from dice_lsp.train.run import RunConfig
from dice_lsp.train.sft import SFTConfig, train
from dice_lsp.train.tasks import generate as generate_tasks

SMALL = ["--hidden-size", "32", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--head-dim", "16",
         "--intermediate-size", "64", "--vocab-size", "700"]


@pytest.fixture(scope="module")
def tasks_jsonl(tmp_path_factory):
    path = tmp_path_factory.mktemp("tasks") / "train.jsonl"
    path.write_text("".join(json.dumps(t.record()) + "\n" for t in generate_tasks(seed=3, count=24, split="train")))
    return path


@pytest.fixture(scope="module")
def scratch_model(tasks_jsonl, tmp_path_factory):
    out = tmp_path_factory.mktemp("scratch") / "model"
    assert main(["train", "init", "--data", str(tasks_jsonl), "--out", str(out), *SMALL]) == 0
    return out


def test_init_writes_a_loadable_model_whose_tokenizer_fits_the_prompts(scratch_model, tasks_jsonl, capsys):
    loaded = load(str(scratch_model), device="cpu")
    config, tokenizer = loaded.config, loaded.tokenizer
    assert (config.hidden_size, config.num_hidden_layers, config.block_size) == (32, 1, 4)
    assert config.vocab_size == tokenizer.vocab_size <= 700 and config.torch_dtype == "bfloat16"
    for token in ("<|im_start|>", "<|im_end|>", "<|MASK|>", "<|endoftext|>"):
        assert len(tokenizer.encode(token)) == 1
    assert config.mask_token_id == tokenizer.token_id("<|MASK|>")
    assert tokenizer.token_id("<|im_end|>") in config.stop_token_ids
    pair = read_pairs(tasks_jsonl)[0]
    text = prompts.render(prompts.end_to_end_prompt(pair.reference), tokenizer.chat_template)
    assert tokenizer.decode(tokenizer.encode(text)) == text
    assert text.rstrip().endswith("<|im_start|>assistant")
    # Learned from the data: the kernel code compresses far better than bytes.
    assert len(tokenizer.encode(pair.solution)) < len(pair.solution.encode()) / 2
    # Untrained, it writes nothing useful, but decoding with the new tokenizer's ids works: eight tokens (or fewer,
    # ending on a stop token), each a real token of the learned vocabulary, none left masked.
    [out] = generate(loaded.model, [tokenizer.encode(text)[:64]], max_new_tokens=8, seed=0)
    ids = list(out.token_ids)
    assert len(ids) == 8 or ids[-1] in config.stop_token_ids, ids
    assert all(0 <= i < tokenizer.vocab_size for i in ids) and config.mask_token_id not in ids


def test_init_refuses_a_bad_shape_in_one_line(tasks_jsonl, tmp_path, capsys):
    assert main(["train", "init", "--data", str(tasks_jsonl), "--out", str(tmp_path / "m"), "--heads", "5",
                 "--kv-heads", "2"]) != 0
    err = capsys.readouterr().err
    assert "--heads (5) must be a multiple of --kv-heads (2)" in err and "Traceback" not in err
    assert not (tmp_path / "m").exists()


def test_the_shape_options_help_states_the_real_defaults():
    from dataclasses import fields

    from dice_lsp.commands.train import SHAPE_OPTIONS
    from dice_lsp.train.scratch import Shape

    defaults = {f.name: f.default for f in fields(Shape)}
    for name, help_text in SHAPE_OPTIONS:
        assert f"default {defaults[name]}" in help_text, name


def test_time_limit_stops_the_run_and_finishes_the_schedule(scratch_model, tasks_jsonl, tmp_path):
    out = tmp_path / "run"
    summary = train(RunConfig(model=str(scratch_model), out=str(out), lr=1e-3, progress=False, time_limit=1e-6),
                    SFTConfig(data=str(tasks_jsonl), epochs=50, batch_size=2, cutoff=4096, kinds=("e2e",)))
    assert summary["stopped_by_time_limit"] is True and summary["steps"] == 1
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 1 and records[0]["lr"] == pytest.approx(1e-4)  # cosine to 10 % of lr, by the clock
    assert load(summary["final"], device="cpu").config.hidden_size == 32


def test_stop_after_pauses_the_run_and_the_same_command_continues_it(scratch_model, tasks_jsonl, tmp_path, capsys):
    out = tmp_path / "run"
    command = ["train", "sft", "--model", str(scratch_model), "--data", str(tasks_jsonl), "--out", str(out),
               "--epochs", "50", "--batch-size", "2", "--cutoff", "4096", "--kinds", "e2e", "--lr", "1e-3",
               "--no-progress", "--time-limit", "3600", "--stop-after", "1e-6"]
    for piece in (1, 2):
        assert main(command) == 0
        captured = capsys.readouterr()
        summary = json.loads(captured.out)
        assert summary["paused"] is True and summary["steps"] == piece
        assert (summary["resumed_from"] is None) == (piece == 1)
        assert "run the same command again to continue" in captured.err
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    assert all(r["lr"] > 9e-4 for r in records)  # the schedule spans the hour of --time-limit, not the pieces


def test_kernelbench_layout_is_what_eval_reads(tmp_path, capsys):
    from dice_lsp.evaluation.problems import find_problems, solution_files

    root = tmp_path / "heldout"
    assert main(["data", "tasks", str(root), "--kernelbench", "--split", "heldout", "--count", "9", "--seed", "2"]) == 0
    problems = find_problems(root)
    assert len(problems) == 9 and {p.level for p in problems} <= {1, 2}
    assert all((p.level == 2) == ("_fusion_" in p.name) for p in problems)
    for problem in problems:
        assert "class Model(" in problem.read() and "ModelNew" not in problem.read()
        found = solution_files(root / "solutions", problem)
        assert list(found) == [0] and "class ModelNew(" in found[0].read_text()


def test_init_never_replaces_a_checkpoint_unless_forced(scratch_model, tasks_jsonl, tmp_path, capsys):
    """OUT may be a trained model (`train sft --out` of an earlier run): init refuses it before any work."""
    out = tmp_path / "run"
    shutil.copytree(scratch_model, out)
    (out / "trained.marker").write_text("hours of SFT")
    assert main(["train", "init", "--data", str(tasks_jsonl), "--out", str(out), *SMALL]) == 2
    assert capsys.readouterr().err.strip() == f"dice-lsp train: {out} is not empty (a checkpoint of an earlier " \
                                              "run?); name a new directory, or pass --force to replace it"
    assert (out / "trained.marker").read_text() == "hours of SFT"
    assert main(["train", "init", "--data", str(tasks_jsonl), "--out", str(out), *SMALL, "--force"]) == 0
    assert not (out / "trained.marker").exists() and (out / "config.json").is_file()
    empty = tmp_path / "empty"
    empty.mkdir()  # an empty folder made for it is fine
    assert main(["train", "init", "--data", str(tasks_jsonl), "--out", str(empty), *SMALL]) == 0
