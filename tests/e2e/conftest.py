"""What the end-to-end tests leave when one fails: `on_failure` takes callbacks that save what the editor showed
(a screenshot, its logs) into the artefact folder, which CI keeps: DICE_E2E_ARTIFACTS, else .ci/artifacts/."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from workbench import artifacts_folder

_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if outcome.get_result().failed:
        item.stash[_FAILED] = True


@pytest.fixture
def on_failure(request):
    """A list of callbacks, each called with (folder, test name) after the test, if it failed."""
    callbacks: list[Callable[[Path, str], None]] = []
    yield callbacks
    if request.node.stash.get(_FAILED, False):
        folder = artifacts_folder()
        name = re.sub(r"[^\w.-]+", "_", request.node.name)
        for callback in callbacks:
            try:
                callback(folder, name)
            except Exception as error:  # noqa: BLE001 -- a failed screenshot must not hide the test's own failure
                print(f"could not save an artefact of {name}: {error}")
