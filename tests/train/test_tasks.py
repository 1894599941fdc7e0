"""The task generator: every template renders solutions the anatomy reads as honest (one DICE split, kernels, no
warnings), references run on the CPU (at a tiny size; the gigabyte sizes live only in the text) and repeat
themselves, ModelNew holds the same parameters as Model after the same seed, splits hold out whole parameter
combinations and whole layouts, one task per device-code feature compiles with nvcc (slow), and on a GPU one instance of every
template passes the harness.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dice_lsp.anatomy import parse
from dice_lsp.train.data import read_pairs
from dice_lsp.train.errors import TrainError
from dice_lsp.train.tasks import FAMILIES, generate, problem, render, split_of, templates

ROOT = Path(__file__).resolve().parents[2]
ALL = [(family, name) for family in FAMILIES for name in templates(family)]
SEEDS = range(5)


def _module(text: str, monkeypatch=None) -> dict:
    """Run a file's text in a fresh namespace; with monkeypatch, load_inline returns a stand-in (no build)."""
    if monkeypatch is not None:
        import torch.utils.cpp_extension as cpp_extension

        monkeypatch.setattr(cpp_extension, "load_inline", lambda **kwargs: object())
    namespace: dict = {"__name__": "task_under_test"}
    exec(compile(text, "<task>", "exec"), namespace)
    return namespace


def test_every_family_has_several_templates():
    assert len(ALL) >= 40
    for family in FAMILIES:
        assert len(templates(family)) >= (1 if family == "attention" else 2), family


@pytest.mark.parametrize("family,name", ALL)
def test_solutions_read_as_honest(family, name):
    for seed in SEEDS:
        task = render(family, name, seed, heldout_style=seed % 2 == 1)
        anatomy = parse(task.solution, task.reference)
        warnings = [(f.code, f.message) for f in anatomy.findings if f.severity in ("warning", "error")]
        assert not warnings, (seed, warnings)
        assert not anatomy.syntax_errors and len(anatomy.splits) == 1 and anatomy.kernels, seed
        core = task.solution[anatomy.splits[0].core.start:anatomy.splits[0].core.end]
        assert "at::cuda::getCurrentCUDAStream()" in core
        assert "C10_CUDA_KERNEL_LAUNCH_CHECK()" in core or "cudaGetLastError()" in core
        assert "TORCH_CHECK" in core
        assert ", stream>>>" in core  # every launch is on the current stream
        assert not parse(task.reference).notes, seed


@pytest.mark.parametrize("family,name", ALL)
def test_references_run_on_cpu_and_repeat(family, name):
    for seed in range(2):
        task = render(family, name, seed, heldout_style=seed == 1, size="tiny")
        module = _module(task.reference)
        outputs = []
        for _ in range(2):
            torch.manual_seed(7)
            model = module["Model"](*module["get_init_inputs"]()).eval()  # as the harness runs it
            inputs = module["get_inputs"]()
            assert all(t.device.type == "cpu" and (t.dtype == torch.float32 or not t.is_floating_point())
                       for t in inputs)
            with torch.no_grad():
                outputs.append(model(*inputs))
        assert outputs[0].dtype in (torch.float32, torch.int64) and torch.isfinite(outputs[0]).all(), seed
        assert torch.equal(outputs[0], outputs[1]), seed


@pytest.mark.parametrize("family,name", ALL)
def test_model_new_creates_the_same_parameters(family, name, monkeypatch):
    for seed in range(3):
        task = render(family, name, seed)
        reference, solution = _module(task.reference), _module(task.solution, monkeypatch)
        args = reference["get_init_inputs"]()
        torch.manual_seed(42)
        model = reference["Model"](*args)
        torch.manual_seed(42)
        model_new = solution["ModelNew"](*args)
        ours, theirs = list(model_new.parameters()), list(model.parameters())
        assert [p.shape for p in ours] == [p.shape for p in theirs], seed
        assert all(torch.equal(a, b) for a, b in zip(ours, theirs)), seed


def test_generate_is_reproducible_and_varied():
    first, again = generate(3, 40), generate(3, 40)
    assert first == again
    assert first != generate(4, 40)
    assert {t.family for t in first} == set(FAMILIES)
    assert len({t.solution for t in first}) == 40
    assert len({t.template for t in first}) >= 15


def test_held_out_combinations_never_reach_training():
    train = generate(0, 300, split="train") + generate(1, 300, split="train")
    heldout = generate(0, 120, split="heldout")
    assert all(t.split == "train" for t in train) and all(t.split == "heldout" for t in heldout)
    combos = lambda tasks: {(t.family, t.template, t.shape_class) for t in tasks}  # noqa: E731
    assert not combos(train) & combos(heldout)
    assert {t.family for t in heldout} == set(FAMILIES)
    assert all(t.split == split_of(t.family, t.template, t.shape_class) for t in train + heldout)


def test_generate_refuses_unknown_families():
    with pytest.raises(TrainError, match="unknown task families"):
        generate(0, 3, ["convolution"])


def test_held_out_layouts_never_reach_training():
    """A held-out-style task shows at least one held-out option (a phrasing, name or layout) and no training task
    shows any: neither its layout key nor the option's text appears in training references."""
    train = generate(0, 400, split="train") + generate(1, 200, split="heldout") + generate(2, 200, split="all")
    styled = generate(0, 200, split="heldout-style")
    assert all(t.split == "heldout-style" for t in styled) and {t.family for t in styled} == set(FAMILIES)
    assert not {t.style for t in train} & {t.style for t in styled}
    held = lambda options: options[options.index("|") + 1:]  # noqa: E731
    texts = [phrase.split("{")[0] for phrase in held(problem.CLASS_PHRASES)] + [":param "]
    names = [name for name in held(problem.ONE_NAMES)] + [n for pair in held(problem.TWO_NAMES) for n in pair]
    names += [case(name) for options in problem.SIZE_NAMES.values() for name in held(options)
              for case in (str, str.upper)]
    local_sizes = re.compile(r"def get_(init_)?inputs\(\):\n    \w+ = ")  # the held-out "locals" layout

    def held_out_shown(text: str) -> bool:
        return (any(marker in text for marker in texts) or bool(local_sizes.search(text))
                or any(re.search(rf"[ (]{re.escape(n)}\b", text) for n in names))

    for task in train:
        assert task.split in ("train", "heldout"), task.style
        assert not held_out_shown(task.reference), task.reference
    shown = [t for t in styled if held_out_shown(t.reference)]
    assert len(shown) == len(styled)
    # ... and the op combination of each is a training one, so the split measures the phrasing alone
    assert all(split_of(t.family, t.template, t.shape_class) == "train" for t in styled)


def test_layouts_vary_the_text_not_the_op():
    """One op in many layouts: docstrings of each convention, hints, constants of each kind, rand and randn."""
    tasks = [render("softmax", "warp_row", seed) for seed in range(60)]
    refs = "\n".join(t.reference for t in tasks)
    for marker in ('"""', "Args:", "Parameters\n", "-> torch.Tensor", "torch.rand(", "torch.randn(", "# ",
                   "from torch import nn", ": int = "):
        assert marker in refs, marker
    assert len({t.style for t in tasks}) > 40


def test_large_sizes_live_only_in_the_text():
    """A large layout grows the problem's inputs to gigabytes (counted on the meta device, never allocated); a
    tiny one shrinks them; the solution is the same text either way."""
    grown = 0
    for family, name in ALL:
        big, drawn = render(family, name, 3, size="large"), render(family, name, 3, size="drawn")
        assert big.solution == drawn.solution
        space: dict = {}
        with torch.device("meta"):
            exec(compile(big.reference, "<large>", "exec"), space)
            size = sum(t.numel() * t.element_size() for t in space["get_inputs"]())
        grown += size > 1 << 29
        assert size < 5 << 30, (family, name, size)
    assert grown >= len(ALL) * 2 // 3


def test_template_weights_shift_the_draw_and_reject_what_is_not_a_template():
    from collections import Counter

    from dice_lsp.train.tasks import speed_weights

    weights = speed_weights({"softmax/block_row": 0.18, "softmax/warp_row": 1.26, "softmax/column": 9.0,
                             "softmax/two_kernel": None})
    assert weights == {"softmax/block_row": 0.25, "softmax/warp_row": 1.26, "softmax/column": 2.0}
    counts = Counter(t.template for t in generate(0, 400, ["softmax"], weights=weights))
    assert counts["column"] > counts["warp_row"] > counts["block_row"] > 0
    assert counts["two_kernel"] > counts["block_row"]  # no measurement: weight 1
    never = Counter(t.template for t in generate(0, 60, ["softmax"], weights={"softmax/block_row": 0}))
    assert "block_row" not in never and len(never) == len(templates("softmax")) - 1
    with pytest.raises(TrainError, match="no template"):
        generate(0, 3, weights={"softmax/fastest": 1.0})
    with pytest.raises(TrainError, match="every template of softmax has weight 0"):
        generate(0, 3, ["softmax"], weights={f"softmax/{name}": 0 for name in templates("softmax")})


def test_data_tasks_favors_fast_templates_from_a_speedups_file(tmp_path):
    speedups = tmp_path / "speedups.json"
    speedups.write_text(json.dumps({f"norm/{name}": 0.0 for name in templates("norm")[1:]}))
    target = tmp_path / "tasks.jsonl"
    command = [sys.executable, "-m", "dice_lsp", "data", "tasks", str(target), "--count", "120", "--families", "norm",
               "--split", "all", "--favor-fast", str(speedups)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    drawn = [json.loads(line)["template"] for line in target.read_text().splitlines()]
    first = templates("norm")[0]  # the others are clamped to the floor: drawn, but rarely
    assert drawn.count(first) > 2 * max(drawn.count(other) for other in set(drawn) - {first})
    speedups.write_text("{not json")
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode != 0 and "is not JSON" in done.stderr


def test_data_tasks_writes_pairs_curate_and_sft_read(tmp_path):
    target = tmp_path / "tasks.jsonl"
    done = subprocess.run([sys.executable, "-m", "dice_lsp", "data", "tasks", str(target), "--count", "12",
                           "--seed", "5", "--families", "norm", "matmul", "--split", "all"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "wrote 12 all tasks" in done.stdout
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert {line["family"] for line in lines} == {"norm", "matmul"}
    assert all({"reference", "solution", "family", "template", "split"} <= set(line) for line in lines)
    assert len(read_pairs(target)) == 12


# Templates whose CUDA covers each distinct device-code feature the generator writes, compiled with nvcc on the CPU
# machine: float4 loads, structs passed by value, warp shuffles, shared-memory trees and tiles, atomics, two kernels on
# one stream. Nine, not one per family: each build costs ~16 s of CI's two cores (18 took 287 s of a 30-minute CI on
# 2026-12-07), and the GPU suite builds and runs every template (test_one_instance_of_every_template_is_correct_on_a_gpu)
REPRESENTATIVES = [("unary", "float4"), ("binary", "strided"), ("matmul", "tiled"),
                   ("fusion", "scale_softmax_two_kernel"), ("loss", "row_warp"), ("attention", "block_per_query"),
                   ("conv", "transposed"), ("norm", "frobenius"), ("pooling", "max")]


@pytest.mark.slow
def test_one_task_per_device_code_feature_compiles_with_nvcc():
    from dice_lsp.harness import Options, check_many

    tasks = [render(family, name, 0) for family, name in REPRESENTATIVES]
    reports = check_many([(t.reference, t.solution) for t in tasks], Options(device="cpu"))
    statuses = {f"{t.family}/{t.template}": (r.status, r.message[:400]) for t, r in zip(tasks, reports)}
    assert all(status == "built-not-run" for status, _ in statuses.values()), statuses


def clean(report) -> bool:
    """Correct with no warning or error finding about the kernel. A solution that picks its kernel by the input's
    shape leaves its other kernel unlaunched on these inputs: that note alone is not a failure (as in
    benchmarks/tasks_verify.py); nor are the warnings about the check itself that the robust metric leaves out."""
    from dice_lsp.evaluation.metrics import ABOUT_THE_CHECK

    allowed = {"kernel-not-launched", *ABOUT_THE_CHECK}
    return report.correct and not any(f.severity == "error" or (f.severity == "warning" and f.code not in allowed)
                                      for f in report.findings)


def unclean(report) -> list[str]:
    """What `clean` read: the report's line and its findings above information, with their messages."""
    return [report.summary()] + [f"{f.code} ({f.severity}): {f.message}" for f in report.findings
                                 if f.severity != "information"]


def family_pairs(family: str) -> list[tuple[str, str]]:
    """(reference, solution) of one instance (seed 0) of each of the family's templates."""
    return [(t.reference, t.solution) for t in (render(family, name, 0) for name in templates(family))]


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.prebuild(pairs=family_pairs)
@pytest.mark.parametrize("family", FAMILIES)
def test_one_instance_of_every_template_is_correct_on_a_gpu(family, prebuilt):
    """What training relies on: each template's solution builds, runs on the GPU, matches its reference on fresh
    inputs and does nothing the deception checks flag (26 of 26 on the H200 with tasks_verify.py, RESULTS.md).
    A test per family, so each family's result is known when its checks end; every family's builds run at once,
    before the first family is checked (`prebuilt`, tests/conftest.py)."""
    from dice_lsp.harness import Options, check_many

    pairs = family_pairs(family)
    reports = check_many(pairs, Options(device="auto", baseline="eager", timing_trials=20, warmup_trials=2))
    gpus = {torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())}
    names = [f"{family}/{name}" for name in templates(family)]
    failed = {name: unclean(r) for name, r in zip(names, reports) if not clean(r)}
    assert not failed, failed
    assert all(r.device in gpus and r.speedup_eager > 0 for r in reports), [r.summary() for r in reports]
