"""The architecture as tests: the import contracts in pyproject.toml hold on the package as it installs, a contract
breaks when code breaks it, and every package folder is installed under the one `dice_lsp` namespace.

import-linter reads folders, and the folders engine/ and harness/ install as dice_lsp/engine and dice_lsp/harness, so
the contracts are checked on a copy laid out as installed. The same check from a checkout, as a command:

    python3 tests/test_layers.py

prints lint-imports' report and exits with its status.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "pyproject.toml"


def lay_out(target: Path) -> Path:
    """The package's Python files in `target` as they install: each folder of pyproject.toml's package-dir at its
    dotted name (engine/ at dice_lsp/engine/). Returns `target`."""
    mapping = tomllib.loads(CONFIG.read_text())["tool"]["setuptools"]["package-dir"]

    def not_python(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if n == "__pycache__" or not (n.endswith(".py") or Path(folder, n).is_dir())]

    for name, folder in sorted(mapping.items()):  # a parent before its children: dice_lsp, then dice_lsp.engine
        shutil.copytree(ROOT / folder, target.joinpath(*name.split(".")), ignore=not_python, dirs_exist_ok=True)
    return target


def lint(layout: Path, capture: bool = True) -> subprocess.CompletedProcess:
    """lint-imports with pyproject.toml's contracts on the package laid out in `layout`."""
    linter = shutil.which("lint-imports")
    if linter is None:
        raise SystemExit("lint-imports is not on PATH: pip install -e '.[test]' installs import-linter")
    # Run away from the checkout: from its root, the folder dice_lsp/ would be found before the laid-out copy.
    env = dict(os.environ, PYTHONPATH=str(layout))
    if capture:
        env["COLUMNS"] = "200"  # one line per contract in what a test reads
    return subprocess.run([linter, str(CONFIG)], capture_output=capture, text=True, cwd=layout, env=env)


def test_the_import_contracts_hold(tmp_path):
    result = lint(lay_out(tmp_path))
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "BROKEN" not in result.stdout and " 0 broken" in result.stdout


def test_the_session_importing_pygls_breaks_a_contract(tmp_path):
    """The contract that keeps pygls out of the session is a live one: a module of the session that imports it
    through another package is reported, by the contract's name."""
    layout = lay_out(tmp_path)
    (layout / "dice_lsp" / "anatomy" / "leak.py").write_text("import lsprotocol.types\n")
    (layout / "dice_lsp" / "session" / "leak.py").write_text("from dice_lsp.anatomy import leak\n")
    result = lint(layout)
    assert result.returncode != 0
    assert "Only the LSP side (server, lsp, convert, and the CLI above them) imports pygls or lsprotocol, directly or " \
           "not BROKEN" in result.stdout
    assert "dice_lsp.session.leak -> dice_lsp.anatomy.leak" in result.stdout


def test_one_namespace_holds_every_package(tmp_path):
    """A non-editable install (a wheel's layout) has dice_lsp as its only top-level package, with every package
    pyproject.toml lists, and the bundled model inside the engine."""
    config = tomllib.loads(CONFIG.read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = set()
    for name, folder in config["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            found.add(".".join((name, *relative.parts)) if relative.parts else name)
    assert found == listed, f"pyproject.toml's packages list misses {found - listed} or names {listed - found}"
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "dice_lsp", "engine", "harness"):  # built away from the checkout,
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy2  # which setuptools would litter
        copy(ROOT / name, source / name)
    installed = tmp_path / "installed"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "--target", str(installed), str(source)],
                   check=True, capture_output=True, cwd=tmp_path)
    top = {p.name for p in installed.iterdir() if (p / "__init__.py").exists()}
    assert top == {"dice_lsp"}, f"the wheel installs top-level packages {top}; only dice_lsp may be one"
    assert (installed / "dice_lsp" / "engine" / "bundled" / "model.safetensors").is_file()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="dice-lsp-layers-") as folder:
        sys.exit(lint(lay_out(Path(folder)), capture=False).returncode)
