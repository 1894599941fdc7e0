"""The settings' defaults have one owner: package.json declares the same keys with the same defaults, the decoding
settings' descriptions are the engine's help, and a check's defaults are the harness's, in the editor and the command
line alike."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from dice_lsp.checking import check_options
from dice_lsp.cli import build_parser
from dice_lsp.commands.check import options_from
from dice_lsp.engine.settings import DecodeSettings
from dice_lsp.harness import Options
from dice_lsp.settings import CLIENT_ONLY, Decoding, Settings, declared, package_json, read_settings

PACKAGE = Path(__file__).parents[2] / "vscode-extension" / "package.json"


def test_package_json_declares_the_python_defaults():
    package = json.loads(PACKAGE.read_text())
    properties = package["contributes"]["configuration"]["properties"]
    assert set(properties) - set(CLIENT_ONLY) == set(declared()), "run python3 -m dice_lsp.settings --package-json"
    assert package_json(copy.deepcopy(package)) == package, (
        "package.json is out of date: python3 -m dice_lsp.settings --package-json vscode-extension/package.json")
    assert properties["dice.decoding.steps"]["default"] == DecodeSettings().steps
    assert properties["dice.decoding.strategy"]["enum"] == ["static", "dynamic"]


def test_an_editor_with_no_settings_checks_as_the_command_line_does_with_no_flags():
    """Both take a check's defaults from the harness's Options: trials, tolerance, baseline, timeouts, sandbox."""
    from_editor = check_options(Settings())
    from_command_line = options_from(build_parser().parse_args(["check", "ref.py", "solution.py"]))
    assert from_editor == Options() == from_command_line


def test_a_stale_default_or_help_is_rewritten_from_python():
    package = json.loads(PACKAGE.read_text())
    properties = package["contributes"]["configuration"]["properties"]
    properties["dice.timingTrials"]["default"] = 7
    properties["dice.decoding.maxNewTokens"]["description"] = "stale"
    updated = package_json(package)["contributes"]["configuration"]["properties"]
    assert updated["dice.timingTrials"]["default"] == Settings().timing_trials
    assert updated["dice.decoding.maxNewTokens"]["description"] == "The most tokens to write."


def test_client_settings_parse_as_before():
    settings = Settings.from_client({"model": "m", "runOnSave": False, "timingTrials": 0, "tolerance": 1,
                                     "decoding": {"blockSize": None, "steps": 8, "topK": True}, "unknown": 1})
    assert (settings.model, settings.run_on_save, settings.timing_trials, settings.tolerance) == ("m", False, 100, 1.0)
    assert settings.decoding == Decoding(block_size=None, steps=8)
    assert Settings.from_client(None) == Settings() and Settings.from_client(settings.to_client()) == settings


def test_each_value_that_cannot_be_used_is_named_with_why_and_keeps_its_default():
    reading = read_settings({"timingTrials": "5", "tolerance": -1, "device": "gpu", "baseline": "fast",
                             "decoding": {"topP": 0, "strategy": "greedy", "blockSize": None, "steps": 2},
                             "runOnSave": 1, "timingTrial": 3, "interpreter": "/usr/bin/python3"})
    assert reading.problems == (
        "dice.timingTrial: not a dice-lsp setting",  # a typo is named; the extension's launch settings are not
        'dice.device: expected "auto", "cpu", "cuda" or "cuda:N", got "gpu"; using "auto"',  # then in field order
        "dice.decoding.strategy: expected one of \"static\", \"dynamic\", got \"greedy\"; using \"static\"",
        "dice.decoding.topP: must be above 0, got 0; using 1.0",
        "dice.runOnSave: expected true or false, got 1; using true",
        'dice.timingTrials: expected a whole number, got "5"; using 100',
        "dice.tolerance: must be at least 0, got -1; using 0.01",
        'dice.baseline: expected one of "both", "eager", "compile", got "fast"; using "both"',
    )
    assert reading.settings == Settings(decoding=Decoding(steps=2))  # what could be used, was
    assert read_settings({"decoding": 5}).problems == ("dice.decoding: expected an object, got 5; using the defaults",)
    assert read_settings({"device": "cuda:1", "sandbox": "require"}).problems == ()


def test_the_editors_answer_lies_over_the_initialization_options_key_by_key():
    reading = read_settings({"timingTrials": 7, "decoding": {"steps": 2}},
                            {"trustedWorkspace": True, "timingTrials": 3, "decoding": {"steps": 8, "topK": 0}})
    settings = reading.settings
    assert (settings.trusted_workspace, settings.timing_trials, settings.decoding.steps, settings.decoding.top_k) == \
        (True, 7, 2, 0)
    assert read_settings({"trustedWorkspace": "yes"}, {"trustedWorkspace": True}).settings.trusted_workspace is False


def test_package_json_takes_the_bounds_and_choices_from_python():
    package = json.loads(PACKAGE.read_text())
    properties = package["contributes"]["configuration"]["properties"]
    properties["dice.correctnessTrials"]["minimum"] = 0
    properties["dice.decoding.topP"]["minimum"] = 0
    properties["dice.baseline"]["enum"] = ["eager"]
    updated = package_json(package)["contributes"]["configuration"]["properties"]
    assert updated["dice.correctnessTrials"]["minimum"] == 1
    assert "minimum" not in updated["dice.decoding.topP"] and updated["dice.decoding.topP"]["exclusiveMinimum"] == 0
    assert updated["dice.baseline"]["enum"] == ["both", "eager", "compile"]
    assert "enumDescriptions" not in updated["dice.baseline"]  # they described other choices
