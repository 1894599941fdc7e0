"""Flags are checked while argparse parses them: a bad value is a usage error (status 2, one line naming the flag)
before anything is built or loaded, and every flag says what it does in --help."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from dice_lsp.cli import COMMANDS, build_parser, leaves

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ["--model", "m", "--data", "d", "--out", "o"]

BAD = [
    (["check", "ref.py", "--trials", "0"], "argument --trials: must be at least 1, not 0"),
    (["check", "ref.py", "--trials", "-3"], "argument --trials: must be at least 1, not -3"),
    (["check", "ref.py", "--timing-trials", "-1"], "argument --timing-trials: must be at least 0, not -1"),
    (["check", "ref.py", "--device", "banana"], "argument --device: must be auto, cpu, cuda or cuda:N, not 'banana'"),
    (["check", "ref.py", "--tolerance", "-0.1"], "argument --tolerance: must be at least 0, not -0.1"),
    (["check", "ref.py", "--run-timeout", "0"], "argument --run-timeout: must be above 0, not 0"),
    (["generate", "p.py", "--samples", "0"], "argument --samples: must be at least 1, not 0"),
    (["generate", "p.py", "--device", "gpu"], "argument --device: must be auto, cpu, cuda or cuda:N"),
    (["generate", "p.py", "--top-p", "0"], "argument --top-p: must be above 0 and at most 1, not 0"),
    (["generate", "p.py", "--max-new-tokens", "0"], "argument --max-new-tokens: must be at least 1, not 0"),
    (["generate", "p.py", "--temperature", "nan"], "argument --temperature: must be at least 0, not nan"),
    (["eval", "problems", "--batch", "0"], "argument --batch: must be at least 1, not 0"),
    (["eval", "problems", "--trials", "x"], "argument --trials: expected a whole number, not 'x'"),
    (["data", "tasks", "out.jsonl", "--count", "0"], "argument --count: must be at least 1, not 0"),
    (["data", "curate", "in", "out", "--device", "cuda:x"], "argument --device: must be auto, cpu, cuda or cuda:N"),
    (["train", "sft", *TRAIN, "--batch-size", "0"], "argument --batch-size: must be at least 1, not 0"),
    (["train", "rl", *TRAIN, "--stage", "e2e", "--harness-device", "tpu"], "argument --harness-device: must be"),
    (["train", "init", "--data", "d", "--out", "o", "--layers", "0"], "argument --layers: must be at least 1, not 0"),
]


@pytest.mark.parametrize("argv, message", BAD, ids=[" ".join(argv[:3]) for argv, _ in BAD])
def test_bad_values_are_usage_errors_at_parse_time(argv, message, capsys):
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(argv)
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err


def test_check_with_zero_trials_is_one_line_and_builds_nothing(tmp_path):
    """The issue's case, end to end: before, `check --trials 0` built the solution and reported it crashed."""
    (tmp_path / "ref.py").write_text("class Model:\n    pass\n")
    done = subprocess.run([sys.executable, "-m", "dice_lsp", "check", "ref.py", "missing.py", "--trials", "0"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == "dice-lsp check: error: argument --trials: must be at least 1, not 0"
    assert "Traceback" not in done.stderr


def test_no_timed_trials_needs_no_baseline(capsys):
    """Before, `--timing-trials 0` with a baseline reported "0.00x vs eager" for a correct solution."""
    from dice_lsp.cli import main

    assert main(["check", "ref.py", "sol.py", "--timing-trials", "0"]) == 2
    assert "--timing-trials 0 times nothing, so there is no speedup against both: add --baseline none" in \
        capsys.readouterr().err


def test_good_values_parse():
    args = build_parser().parse_args(["check", "r.py", "--device", "cuda:1", "--timing-trials", "0",
                                      "--tolerance", "0"])
    assert (args.device, args.timing_trials, args.tolerance) == ("cuda:1", 0, 0.0)
    assert build_parser().parse_args(["train", "sft", *TRAIN, "--grad-clip", "inf"]).grad_clip == float("inf")
    # any case, as the extension's own tests pass it in dice.serverArgs and as logging's names are often written
    assert build_parser().parse_args(["serve", "--log-level", "debug"]).log_level == "DEBUG"


def every_leaf() -> list[tuple[str, argparse.ArgumentParser]]:
    """Each command's parser that takes options, `serve` too."""
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return [(leaf.prog, leaf) for name in COMMANDS for leaf in leaves(subparsers.choices[name])]


@pytest.mark.parametrize("prog, parser", every_leaf(), ids=[prog for prog, _ in every_leaf()])
def test_every_flag_has_help(prog, parser):
    silent = [action.option_strings or [action.dest] for action in parser._actions
              if not action.help and not isinstance(action, argparse._SubParsersAction)]
    assert not silent, f"{prog}: flags without help text: {silent}"


def test_debug_is_taken_before_or_after_the_command():
    assert build_parser().parse_args(["--debug", "inspect", "f.py"]).debug
    assert build_parser().parse_args(["train", "sft", *TRAIN, "--debug"]).debug
    assert not build_parser().parse_args(["inspect", "f.py"]).debug


def test_model_written_code_requires_the_sandbox_by_default():
    """eval and data curate run a model's candidates: sandboxed or not at all, unless asked; check is `auto`."""
    from dice_lsp.commands.check import options_from

    parser = build_parser()
    assert options_from(parser.parse_args(["check", "ref.py"])).sandbox == "auto"
    assert options_from(parser.parse_args(["eval", "problems", "--model", "m"])).sandbox == "require"
    assert options_from(parser.parse_args(["eval", "problems", "--sandbox", "off"])).sandbox == "off"
    assert parser.parse_args(["data", "curate", "in.jsonl", "out.jsonl"]).sandbox == "require"


@pytest.mark.parametrize("command", [["check", "ref.py"], ["eval", "problems"]])
def test_check_flags_default_to_the_harness_options(command):
    """harness.Options owns how a check runs: with no flags, check and eval check as it would."""
    from dice_lsp.commands.check import options_from
    from dice_lsp.harness import Options

    args = build_parser().parse_args(command)
    ours, owner = options_from(args), Options()
    for name in ("correctness_trials", "timing_trials", "atol", "rtol", "build_timeout", "run_timeout", "device",
                 "light_build", "tf32"):
        assert getattr(ours, name) == getattr(owner, name), name
