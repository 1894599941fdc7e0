"""The decoding flags have one owner: generate, eval and train rl show and use DecodeSettings' defaults (train rl
BiC-RL's rollout overrides), and reading them, like all of `--help`, never loads torch."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from dice_lsp.cli import build_parser
from dice_lsp.commands.decoding import FLAGS, decoding_from
from dice_lsp.engine.settings import DecodeSettings
from dice_lsp.settings import Decoding
from dice_lsp.train.rollout import ROLLOUT_DECODING

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("command", [["generate", "x.py"], ["eval", "problems"]])
def test_generate_and_eval_decode_with_the_editors_defaults(command):
    args = build_parser().parse_args(command)
    assert decoding_from(args) == Decoding()  # block size unset (the checkpoint's), the rest DecodeSettings'
    assert {name: getattr(args, name) for name in FLAGS if name != "block_size"} == {
        name: getattr(DecodeSettings(), name) for name in FLAGS if name != "block_size"}


def test_flags_parse_to_the_fields_types_and_choices():
    args = build_parser().parse_args(["generate", "x.py", "--steps", "8", "--top-p", "0.5", "--strategy", "dynamic",
                                      "--block-size", "2"])
    assert decoding_from(args) == Decoding(block_size=2, steps=8, top_p=0.5, strategy="dynamic")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["generate", "x.py", "--strategy", "greedy"])


def accepts(flag: str, value) -> bool:
    try:
        build_parser().parse_args(["generate", "x.py", flag, str(value)])
    except SystemExit:
        return False
    return True


def test_flags_keep_the_bounds_the_editors_settings_keep():
    """Each bounded field of settings.Decoding (the owner of the bounds, which package.json reads too), tried on
    its flag at and just past each bound: the command line refuses exactly what the editor's settings refuse."""
    checked = []
    for item in fields(Decoding):
        bounds, flag = item.metadata, "--" + item.name.replace("_", "-")
        step = 1 if item.name in ("block_size", "steps", "top_k", "max_new_tokens") else 0.01
        if "minimum" in bounds:
            assert accepts(flag, bounds["minimum"]) and not accepts(flag, bounds["minimum"] - step), flag
        if "exclusiveMinimum" in bounds:
            low = bounds["exclusiveMinimum"]
            assert not accepts(flag, low) and accepts(flag, low + step), flag
        if "maximum" in bounds:
            assert accepts(flag, bounds["maximum"]) and not accepts(flag, bounds["maximum"] + step), flag
        if "enum" in bounds:
            assert all(accepts(flag, choice) for choice in bounds["enum"]) and not accepts(flag, "other"), flag
        checked += [item.name] if bounds else []
    assert len(checked) == 9  # every bounded field but given_prefix (a switch) and prompt_template (a path)


def test_train_rl_rollouts_default_to_bic_rl_decoding():
    args = build_parser().parse_args(["train", "rl", "--model", "m", "--data", "d", "--out", "o", "--stage", "e2e"])
    assert (args.threshold, args.temperature, args.max_new_tokens) == (
        ROLLOUT_DECODING.threshold, ROLLOUT_DECODING.temperature, ROLLOUT_DECODING.max_new_tokens)
    assert args.steps == 0  # train rl's --steps counts optimizer steps, not denoising passes
    assert ROLLOUT_DECODING.strategy == "dynamic" and ROLLOUT_DECODING.threshold == 0.9


def test_help_texts_are_the_owners(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["generate", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for item in fields(DecodeSettings):
        if item.name in FLAGS:
            assert " ".join(item.metadata["help"].split()) in help_text


def test_help_and_inspect_do_not_load_torch(tmp_path):
    problem = tmp_path / "p.py"
    problem.write_text("class Model:\n    pass\n")
    for argv in (["--help"], ["generate", "--help"], ["train", "rl", "--help"], ["eval", "--help"],
                 ["inspect", str(problem)]):
        probe = ("import sys, runpy; sys.argv = ['dice-lsp', *sys.argv[1:]]\n"
                 "try:\n    runpy.run_module('dice_lsp', run_name='__main__')\n"
                 "except SystemExit:\n    pass\n"
                 "print('torch loaded' if 'torch' in sys.modules else 'no torch', file=sys.stderr)")
        done = subprocess.run([sys.executable, "-c", probe, *argv], cwd=ROOT, capture_output=True, text=True,
                              timeout=120)
        assert done.stderr.strip().endswith("no torch"), (argv, done.stderr[-2000:])
