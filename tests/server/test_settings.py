"""The settings' defaults have one owner: package.json declares the same keys with the same defaults, and the
decoding settings' descriptions are the engine's help."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from dice_lsp.engine.settings import DecodeSettings
from dice_lsp.settings import CLIENT_ONLY, Decoding, Settings, declared, package_json

PACKAGE = Path(__file__).parents[2] / "vscode-extension" / "package.json"


def test_package_json_declares_the_python_defaults():
    package = json.loads(PACKAGE.read_text())
    properties = package["contributes"]["configuration"]["properties"]
    assert set(properties) - set(CLIENT_ONLY) == set(declared()), "run python3 -m dice_lsp.settings --package-json"
    assert package_json(copy.deepcopy(package)) == package, (
        "package.json is out of date: python3 -m dice_lsp.settings --package-json vscode-extension/package.json")
    assert properties["dice.decoding.steps"]["default"] == DecodeSettings().steps
    assert properties["dice.decoding.strategy"]["enum"] == ["static", "dynamic"]


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
