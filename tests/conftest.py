"""Shared fixtures for every package's tests: a tiny random DICE-shaped checkpoint, GPU test skipping, the GPU
tests' builds at once (`gpu_builds`, `prebuilt`), and each outcome written as it happens where DICE_TEST_RECORD
names a folder (benchmarks/gpu_session.sh reads it).

`tiny_model_dir` is written once per session; treat it as read-only (copy it before changing files in it).
"""

from __future__ import annotations

import os

import pytest

_outcomes = None  # an OutcomeLog while DICE_TEST_RECORD is set


def pytest_configure(config):
    global _outcomes
    folder = os.environ.get("DICE_TEST_RECORD")
    if folder:
        from outcome_log import OutcomeLog

        _outcomes = OutcomeLog(folder)


def pytest_unconfigure(config):
    if _outcomes is not None:
        _outcomes.close()


def pytest_runtest_logstart(nodeid, location):
    if _outcomes is not None:
        _outcomes.started(nodeid)


def pytest_runtest_logreport(report):
    if _outcomes is not None:
        _outcomes.report(report)


@pytest.fixture(scope="session", autouse=True)
def shared_build_cache(tmp_path_factory):
    """One harness build cache for the whole test session (and the servers it starts), so each distinct extension
    and the precompiled torch header are built once, and the user's own cache is never touched."""
    root = tmp_path_factory.mktemp("dice-cache")
    previous = os.environ.get("DICE_LSP_CACHE")
    os.environ["DICE_LSP_CACHE"] = str(root)
    yield root
    if previous is None:
        os.environ.pop("DICE_LSP_CACHE", None)
    else:
        os.environ["DICE_LSP_CACHE"] = previous


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny random SDAR checkpoint in the HF layout (config.json, model.safetensors, tokenizer.json, ...)."""
    from tiny_model import build

    return build(tmp_path_factory.mktemp("tiny-model") / "tiny-sdar")


@pytest.fixture(scope="session")
def gpu_builds(request, shared_build_cache):
    """The builds of every selected test's `prebuild` pairs, queued at once on every core when the first GPU test
    that asks is set up (tests/fixtures/gpu_builds.py); `add` queues more (the bundled model's drafts)."""
    from gpu_builds import Builds, declared

    from dice_lsp.harness import Options

    builds = Builds(Options(cache_dir=str(shared_build_cache / "extensions")))
    builds.add(declared(request.session.items))
    yield builds
    builds.close()


@pytest.fixture(scope="session", autouse=True)
def early_gpu_builds(request):
    """With DICE_TEST_EARLY_BUILDS set on a GPU machine, the GPU tests' builds start with the session, beside the
    tests before the first that waits for them (benchmarks/gpu_session.sh puts only tests that time nothing there)."""
    if os.environ.get("DICE_TEST_EARLY_BUILDS"):
        import torch

        if torch.cuda.is_available():
            request.getfixturevalue("gpu_builds")


@pytest.fixture(scope="session")
def prebuilt(gpu_builds):
    """`gpu_builds` once every build queued so far has ended: asked by the tests that check what they declared."""
    waited = gpu_builds.wait()
    if _outcomes is not None:
        _outcomes.line(event="note", note=f"waited {waited:.1f} s for {len(gpu_builds.queued)} builds")
    return gpu_builds
