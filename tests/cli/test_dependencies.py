"""What `pip install dice-lsp` brings is what the product imports: every module it imports outside the standard
library is a declared dependency (an import guarded by `except ImportError` may come from an extra or be optional
on purpose), and every declared dependency is imported or says in pyproject.toml why it is there without an import.
A user of a fresh install must never meet a ModuleNotFoundError that pip could have prevented (issue 24)."""

from __future__ import annotations

import ast
import functools
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import dice_lsp
import dice_lsp.engine
import dice_lsp.harness

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = [Path(package.__file__).parent for package in (dice_lsp, dice_lsp.engine, dice_lsp.harness)]

# Imported only under `except ImportError`, from no extra, on purpose: the code has a path without them.
OPTIONAL = {"triton": "torch's CUDA wheels bring it; the engine takes its PyTorch path without it"}


def requirement_name(requirement: str) -> str:
    return normalized(re.match(r"[A-Za-z0-9._-]+", requirement).group())


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> tuple[dict[str, str], set[str]]:
    """The core dependencies (name -> the line of pyproject.toml that declares it) and every extra's names."""
    text = (ROOT / "pyproject.toml").read_text()
    project = tomllib.loads(text)["project"]
    lines = {requirement_name(requirement): next(line for line in text.splitlines() if f'"{requirement}"' in line)
             for requirement in project["dependencies"]}
    extras = {requirement_name(r) for group in project["optional-dependencies"].values() for r in group}
    return lines, extras


def guarded(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Whether an import sits in a `try` whose handlers catch ImportError (or its subclass ModuleNotFoundError)."""
    while node in parents:
        node, child = parents[node], node
        if isinstance(node, ast.Try) and child in node.body:
            for handler in node.handlers:
                caught = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
                if any(isinstance(c, ast.Name) and c.id in ("ImportError", "ModuleNotFoundError") for c in caught):
                    return True
    return False


def product_imports() -> dict[str, tuple[str, bool]]:
    """Top-level module name -> (a file that imports it, whether every import of it is guarded), outside the standard
    library and dice_lsp itself."""
    found: dict[str, tuple[str, bool]] = {}
    for folder in PRODUCT:
        for path in sorted(folder.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top in sys.stdlib_module_names or top == "dice_lsp":
                        continue
                    where, was_guarded = found.get(top, (str(path), True))
                    found[top] = (where, was_guarded and guarded(node, parents))
    return found


def distributions(module: str) -> set[str]:
    return {normalized(name) for name in installed().get(module, [module])}


@functools.lru_cache(maxsize=1)
def installed() -> dict[str, list[str]]:
    """Import name -> the installed distributions that provide it (a scan of every installed distribution)."""
    return metadata.packages_distributions()


def test_every_import_of_the_product_is_a_declared_dependency():
    core, extras = declared()
    missing = []
    for module, (where, was_guarded) in sorted(product_imports().items()):
        owners = distributions(module)
        if owners & core.keys() or (was_guarded and (owners & extras or module in OPTIONAL)):
            continue
        missing.append(f"{module} (imported by {where}{', guarded' if was_guarded else ''})")
    assert not missing, f"imported but not declared in pyproject.toml's dependencies: {missing}"


def test_every_declared_dependency_is_imported_or_says_why_not():
    imported = set().union(*(distributions(module) for module in product_imports()))
    core, _ = declared()
    silent = [line.strip() for name, line in core.items() if name not in imported and "#" not in line]
    assert not silent, f"declared, never imported, and no comment saying why: {silent}"
