"""`dice-lsp inspect` as a user runs it: a real subprocess on real files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

FILES = Path(__file__).parent.parent / "anatomy" / "files"


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dice_lsp", *args], capture_output=True, text=True, timeout=60,
                          cwd=cwd)


def test_inspect_prints_kernels_split_and_findings():
    result = run("inspect", str(FILES / "deceptive_never_bound.py"))
    assert result.returncode == 0, result.stderr
    assert "global softmax_kernel at 7:" in result.stdout
    assert "[kernel-not-bound]" in result.stdout
    assert "DICE split for softmax_source" in result.stdout


def test_inspect_json_follows_the_reference_link(tmp_path):
    problems = tmp_path / "problems" / "level1"
    problems.mkdir(parents=True)
    (problems / "1_Square_matrix_multiplication_.py").write_text((FILES / "honest_matmul_odd_strings.py").read_text())
    solution = tmp_path / "solution.py"
    solution.write_text((FILES / "deceptive_one_shot_copy.py").read_text())
    result = run("inspect", str(solution), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["reference_path"].endswith("1_Square_matrix_multiplication_.py")
    warnings = {f["code"] for f in data["findings"] if f["severity"] == "warning"}
    assert {"one-shot-copy", "binding-not-called", "torch-fallback"} <= warnings
    [split] = data["splits"]
    assert split["core"]["line"] == 7


def test_inspect_missing_file_is_one_clear_line():
    result = run("inspect", "/no/such/file.py")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "cannot read /no/such/file.py" in result.stderr


def test_inspect_binary_file_explains(tmp_path):
    path = tmp_path / "blob.py"
    path.write_bytes(b"\x7fELF\x00\x00\xff\xfe")
    result = run("inspect", str(path))
    assert result.returncode == 0
    assert "binary file" in result.stdout
