"""End to end with a real, independent LSP client: headless Neovim drives `python -m dice_lsp` over stdio."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FILES = Path(__file__).parent.parent / "anatomy" / "files"
SCRIPT = Path(__file__).parent / "neovim_client.lua"

# In CI (which sets CI, as .ci/run does) a missing Neovim fails the test: the only end-to-end test with an
# independent client must not vanish as a skip. Elsewhere it is skipped, saying how to get it.
if shutil.which("nvim") is None and not os.environ.get("CI"):
    pytestmark = pytest.mark.skip(reason="Neovim is not installed (.ci/run installs it)")


def test_neovim_is_installed():
    assert shutil.which("nvim"), "Neovim (nvim) is not on PATH, and CI is set: .ci/run should have installed it"


def test_neovim_sees_deceptive_diagnostics_and_applies_generate(tmp_path, tiny_model_dir):
    deceptive = tmp_path / "deceptive.py"
    deceptive.write_text((FILES / "deceptive_bound_not_called.py").read_text())
    problem = tmp_path / "relu_problem.py"
    problem.write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n\n    def forward(self, x):\n        return torch.relu(x)\n\n\n"
        "def get_inputs():\n    return [torch.randn(1024)]\n\n\ndef get_init_inputs():\n    return []\n")
    out = tmp_path / "seen.jsonl"
    env = {**os.environ, "DICE_E2E_OUT": str(out), "DICE_E2E_PYTHON": sys.executable,
           "DICE_E2E_DECEPTIVE": str(deceptive), "DICE_E2E_PROBLEM": str(problem),
           "DICE_E2E_MODEL": str(tiny_model_dir), "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path)}
    subprocess.run(["nvim", "--headless", "--clean", "-n", "-c", f"luafile {SCRIPT}"], env=env, timeout=400,
                   capture_output=True, cwd=tmp_path)
    seen = {}
    for line in out.read_text().splitlines():
        record = json.loads(line)
        seen[record["kind"]] = record["value"]
    assert "error" not in seen, seen.get("error")

    # The deceptive file's findings arrived, on the lines they are about.
    lines = deceptive.read_text().splitlines()
    by_code = {d["code"]: d for d in seen["diagnostics"]}
    assert {"binding-not-called", "torch-fallback"} <= set(by_code)
    assert "torch.relu(x)" in lines[by_code["torch-fallback"]["line"]]
    assert all(d["source"] == "dice" for d in seen["diagnostics"])

    # The code action was listed and applied: the solution file exists beside the problem, linked to it.
    assert "Generate CUDA kernel" in seen["actions"]
    assert seen["applied"]["ok"] is True, seen["applied"]
    solution = tmp_path / "relu_problem_dice.py"
    assert solution.exists()
    assert solution.read_text().startswith("# dice: reference = relu_problem.py\n")
