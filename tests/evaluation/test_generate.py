"""The generate path: kernels written to OUT/kernels before checking, code-less samples recorded, resumes reuse files.

End to end with the engine's tiny random model: its samples fail, as expected.
"""

from __future__ import annotations

import json

import pytest

from dice_lsp.cli import main
from dice_lsp.evaluation import read_records, sources


def generate_args(problem_set, model, out, *more):
    return ["eval", str(problem_set), "--model", str(model), "--levels", "1", "--out", str(out), "--device", "cpu",
            "--baseline", "none", "--timing-trials", "0", "--trials", "2", "--quiet", *more]


def test_generated_kernels_are_kept_and_a_resumed_run_checks_them_without_generating(
        build_cache, problem_set, solution_text, tmp_path, monkeypatch):
    asked = []

    def fake_engine(reference, loaded, decoding, count, progress=None):
        asked.append(("Model" in reference, count))
        if "1e-3" in reference:
            return [(None, "the output held no code block")] * count
        return [(solution_text("return self.ext.add_values(a, b)"), "")] + [(None, "cut off")] * (count - 1)

    monkeypatch.setattr(sources, "generate", fake_engine)
    monkeypatch.setattr(sources.Generator, "loaded", lambda self: "loaded model")
    monkeypatch.setattr(sources.Generator, "find", lambda self: tmp_path)
    out = tmp_path / "out"
    assert main(generate_args(problem_set, "some/model", out, "--samples", "2", "--top-k", "0")) == 0
    assert asked == [(True, 2), (True, 2)]  # one batch of 2 samples per problem
    kernel = out / "kernels/level1/1_add_sample0.py"
    assert kernel.read_text().endswith("return self.ext.add_values(a, b)\n")
    records = read_records(out)
    assert {k: r.report.status for k, r in records.items()} == {
        (1, "1_add", 0): "correct", (1, "1_add", 1): "invalid", (1, "2_small_sum", 0): "invalid",
        (1, "2_small_sum", 1): "invalid"}
    assert records[(1, "1_add", 1)].report.message == "cut off" and records[(1, "1_add", 0)].source == "generated"

    # As if killed after generating 1_add but before its check finished: its record is gone, its file is not.
    log = out / "samples.jsonl"
    log.write_text("".join(line + "\n" for line in log.read_text().splitlines()
                           if (json.loads(line)["problem"], json.loads(line)["sample"]) != ("1_add", 0)))
    asked.clear()
    assert main(generate_args(problem_set, "some/model", out, "--samples", "2", "--top-k", "0")) == 0
    assert asked == []
    assert read_records(out)[(1, "1_add", 0)].report.status == "correct"


def test_tiny_model_end_to_end(build_cache, problem_set, tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "tiny"
    assert main(generate_args(problem_set, tiny_model_dir, out, "--samples", "2", "--max-new-tokens", "64",
                              "--dtype", "float32", "--top-k", "0")) == 0
    records = read_records(out)
    assert sorted(records) == [(1, "1_add", 0), (1, "1_add", 1), (1, "2_small_sum", 0), (1, "2_small_sum", 1)]
    assert all(r.report.status != "correct" for r in records.values())  # random weights write no working kernel
    assert "| 1 | 4 | plain | 0.0% |" in (out / "table.md").read_text()
    assert (out / "chart.png").is_file()


def test_user_errors_are_one_line_with_the_fix(problem_set, tmp_path, capsys):
    assert main(["eval", str(problem_set)]) == 2
    assert "give --model M to generate kernels, or --solutions DIR" in capsys.readouterr().err
    assert main(["eval", str(problem_set), "--solutions", str(tmp_path), "--levels", "4"]) == 2
    assert "has no level4/ (levels found: 1, 2); fix --levels" in capsys.readouterr().err
    assert main(["eval", str(problem_set), "--solutions", str(tmp_path)]) == 2
    assert "holds no solution files for these problems" in capsys.readouterr().err
    assert main(["eval", str(problem_set), "--model", str(tmp_path / "none"), "--out", str(tmp_path / "o")]) == 2
    assert "no checkpoint directory" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    # Greedy decoding (the default) writes one text however many samples are asked for
    assert main(["eval", str(problem_set), "--model", str(tmp_path / "none"), "--samples", "3"]) == 2
    assert "would write 3 identical kernels per problem; sample instead with --top-k 0" in capsys.readouterr().err


def test_the_engine_seam_reads_drafts_and_reports_blocks(monkeypatch):
    from dice_lsp import engine
    from dice_lsp.engine.generation import DecodeProgress, Draft, Generation

    def generate_kernel(reference, loaded, decoding, samples, on_block):
        on_block(DecodeProgress(blocks=3, tokens=(96,) * samples, finished=1, seconds=0.5))
        made = Generation(token_ids=(1, 2), trace=(0, 1), stop_reason="stop")
        return [Draft(made, "class ModelNew: ...\n"), Draft(made, None, "no code block in the output")][:samples]

    monkeypatch.setattr(engine, "generate_kernel", generate_kernel, raising=False)
    seen = []
    assert sources.generate("class Model: ...", "loaded", None, 2, seen.append) == [
        ("class ModelNew: ...\n", ""), (None, "no code block in the output")]
    assert seen == ["block 3, 1/2 samples done"]
    with pytest.raises(sources.EvaluationError, match="returned 2 samples for 3 asked"):
        sources.generate("class Model: ...", "loaded", None, 3)
