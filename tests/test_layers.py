"""The architecture as tests: the import layers (import-linter contracts in pyproject.toml) hold on the package as
installed, and every package folder is installed under the one `dice_lsp` namespace."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The package as a user gets it (a non-editable install into a folder): engine/ and harness/ land inside
    dice_lsp/, which is what import-linter reads (it walks the folders, not setuptools' package-dir mapping)."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "dice_lsp", "engine", "harness"):  # built away from the checkout,
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy2  # which setuptools would litter
        copy(ROOT / name, source / name)
    target = tmp_path_factory.mktemp("installed")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "--target", str(target), str(source)],
                   check=True, capture_output=True, cwd=target)
    return target


def test_import_layers_hold(installed):
    linter = shutil.which("lint-imports")
    assert linter, "import-linter is a test dependency: pip install -e '.[test]'"
    env = dict(os.environ, PYTHONPATH=str(installed))
    # Run outside the checkout: from its root, the source folder `dice_lsp/` would shadow the installed layout.
    result = subprocess.run([linter, str(ROOT / "pyproject.toml")], capture_output=True, text=True, env=env,
                            cwd=installed)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "BROKEN" not in result.stdout and "0 broken" in result.stdout


def test_one_namespace_holds_every_package(installed):
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    mapping = config["package-dir"]
    found = set()
    for name, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            found.add(".".join((name, *relative.parts)) if relative.parts else name)
    assert found == listed, f"pyproject.toml's packages list misses {found - listed} or names {listed - found}"
    top = {p.name for p in installed.iterdir() if (p / "__init__.py").exists()}
    assert top == {"dice_lsp"}, f"the wheel installs top-level packages {top}; only dice_lsp may be one"
    assert (installed / "dice_lsp" / "engine" / "bundled" / "model.safetensors").is_file()
