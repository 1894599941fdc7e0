"""The dice-lsp that the VS Code extension ships (`dice.importStrategy`: useBundled): its wheel, extracted as the
extension extracts it, first on the PYTHONPATH of an interpreter that has dice-lsp's dependencies and not dice-lsp.
A check from there runs its candidate in sandboxed workers, which must import that same copy: the sandbox hides the
folders a user's storage lives in and shows a worker only what it needs."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _interpreter_without_dice_lsp(folder: Path) -> Path:
    """A venv that sees this interpreter's site-packages as plain folders (one .pth line each): their packages import,
    but the .pth files inside them do not run, and one of those is the import hook of an editable dice-lsp."""
    venv.create(folder, with_pip=False)
    python = folder / "bin" / "python"
    own = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    theirs = [*site.getsitepackages(), site.getusersitepackages()]
    Path(own, "dependencies.pth").write_text("".join(f"{p}\n" for p in theirs if os.path.isdir(p)))
    return python


@pytest.mark.slow
def test_a_check_runs_from_the_bundled_copy_the_extension_ships(tmp_path, shared_build_cache):
    built = subprocess.run(["bash", str(ROOT / "vscode-extension" / "scripts" / "wheel.sh")],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stdout + built.stderr
    [wheel] = (ROOT / "vscode-extension" / "bundled").glob("dice_lsp-*.whl")
    bundle = tmp_path / "globalStorage" / "bundled" / "0.1.0"  # as bundle.ts lays it out under the user's storage
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(bundle)
    python = _interpreter_without_dice_lsp(tmp_path / "env")
    work = tmp_path / "work"
    shutil.copytree(ROOT / "examples", work)
    env = {**os.environ, "PYTHONPATH": ""}
    alone = subprocess.run([str(python), "-c", "import dice_lsp"], capture_output=True, text=True, cwd=work, env=env)
    assert alone.returncode != 0 and "No module named 'dice_lsp'" in alone.stderr, alone.stderr  # the premise

    env["PYTHONPATH"] = str(bundle)
    where = subprocess.run([str(python), "-c", "import dice_lsp; print(dice_lsp.__file__)"], capture_output=True,
                           text=True, cwd=work, env=env)
    assert where.stdout.strip() == str(bundle / "dice_lsp" / "__init__.py"), where.stdout + where.stderr
    done = subprocess.run([str(python), "-m", "dice_lsp", "check", "--json", "--device", "cpu", "--baseline", "eager",
                           "--timing-trials", "5", "row_soft_threshold_cpp.py"],
                          capture_output=True, text=True, cwd=work, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["status"] == "correct", report["message"]
    # the workers ran in the sandbox (else an `unsandboxed` warning says why), and from the bundle: nothing else here
    # holds a dice_lsp to import
    assert "unsandboxed" not in [f["code"] for f in report["findings"]], report["findings"]
