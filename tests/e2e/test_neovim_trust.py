"""The README's Neovim example, run by headless Neovim as a user's config: each file's server gets the trust of the
folder the file really lives in, so only files in a trusted folder are ever built and run."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
SCRIPT = Path(__file__).parent / "readme_trust.lua"
SOLUTION = "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n" \
           "        return torch.relu(x)\n"
NO_REFERENCE = "ModelNew has no reference"  # what a trusted server answers next: it got past the trust check

if shutil.which("nvim") is None and not os.environ.get("CI"):  # in CI a missing Neovim fails, as test_neovim says
    pytestmark = pytest.mark.skip(reason="Neovim is not installed (.ci/run installs it)")


def readme_example() -> str:
    """The lua block of the README's "In the editor" section."""
    section = ROOT.joinpath("README.md").read_text().split("## In the editor", 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(r"```lua\n(.*?)```", section, re.S)
    return block


def test_the_readme_example_trusts_only_files_in_a_trusted_folder(tmp_path):
    home = tmp_path / "home"
    files = {"trusted": home / "kernels" / "a_dice.py", "nested": home / "kernels" / "deep" / "b_dice.py",
             "sibling": home / "kernels-evil" / "c_dice.py", "elsewhere": tmp_path / "other" / "d_dice.py",
             "linked": home / "kernels" / "e_dice.py"}
    for name, path in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if name != "linked":
            path.write_text(SOLUTION)
    files["linked"].symlink_to(files["elsewhere"])  # inside the trusted folder by name only
    config = tmp_path / "readme.lua"
    config.write_text(readme_example())
    bin_dir = tmp_path / "bin"  # `python3` in the example is this interpreter (a wrapper keeps its venv)
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (bin_dir / "python3").chmod(0o755)
    out = tmp_path / "seen.jsonl"
    env = {**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(tmp_path), "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "DICE_E2E_OUT": str(out), "DICE_E2E_CONFIG": str(config),
           "DICE_E2E_FILES": "\n".join(str(path) for path in files.values())}
    subprocess.run(["nvim", "--headless", "--clean", "-n", "-c", f"luafile {SCRIPT}"], env=env, timeout=400,
                   capture_output=True, cwd=tmp_path)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert not [r for r in records if r["kind"] == "error"], records
    answers = {Path(r["value"]["file"]).name: r["value"] for r in records}
    for name in ("trusted", "nested"):
        assert NO_REFERENCE in answers[files[name].name]["answer"]["message"], answers
    for name in ("sibling", "elsewhere", "linked"):
        assert answers[files[name].name]["answer"] == {"started": False, "message": "the workspace is not trusted"}
    # Two servers: one for the trusted folder, one for everything else
    assert len({answer["client"] for answer in answers.values()}) == 2
