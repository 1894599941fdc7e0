"""`dice-lsp inspect` as a user and a CI job run it: a real subprocess on real files; findings as `file:line:col:`
lines, several files at once, and an exit status that fails the job on warnings and errors."""

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
    path = FILES / "deceptive_never_bound.py"
    result = run("inspect", str(path))
    assert result.returncode == 1, result.stderr  # warnings: a CI job fails
    assert "global softmax_kernel at 7:" in result.stdout
    assert "DICE split for softmax_source" in result.stdout
    assert f"{path}:26:15: warning [kernel-not-bound] `softmax_ext` is compiled but" in result.stdout.splitlines()[-2]


def test_several_files_and_the_exit_status_ci_reads(tmp_path):
    clean, deceptive = FILES / "honest_add_with_model.py", FILES / "deceptive_never_bound.py"
    assert run("inspect", str(clean)).returncode == 0
    both = run("inspect", str(clean), str(deceptive))
    assert both.returncode == 1
    assert both.stdout.count("\n  reference  class Model at ") == 2
    findings = [line for line in both.stdout.splitlines() if line.startswith(f"{deceptive}:")]
    assert [line.split(" [")[1].split("]")[0] for line in findings] == ["kernel-not-bound", "torch-fallback"]
    # A missing file is said on stderr; the others are still inspected; the status is 2
    missing = run("inspect", str(clean), str(tmp_path / "gone.py"), str(deceptive))
    assert missing.returncode == 2
    assert "cannot read" in missing.stderr and f"{deceptive}:26:15:" in missing.stdout
    as_json = json.loads(run("inspect", str(clean), str(deceptive), "--json").stdout)
    assert [document["path"] for document in as_json] == [str(clean), str(deceptive)]


def test_a_file_with_escapes_in_its_names_is_shown_escaped(tmp_path):
    path = tmp_path / "evil.py"
    text = (FILES / "deceptive_never_bound.py").read_text()
    path.write_text(text.replace("softmax_ext", "softmax_ext\u202e\x1b_ext"))
    result = run("inspect", str(path))
    assert "\x1b" not in result.stdout and "\u202e" not in result.stdout
    assert "\\u202e\\x1b" in result.stdout


def test_inspect_json_follows_the_reference_link(tmp_path):
    problems = tmp_path / "problems" / "level1"
    problems.mkdir(parents=True)
    (problems / "1_Square_matrix_multiplication_.py").write_text((FILES / "honest_matmul_odd_strings.py").read_text())
    solution = tmp_path / "solution.py"
    solution.write_text((FILES / "deceptive_one_shot_copy.py").read_text())
    result = run("inspect", str(solution), "--json")
    assert result.returncode == 1, result.stderr
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
