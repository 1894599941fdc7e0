"""Shared fixtures for every package's tests: a tiny random DICE-shaped checkpoint, and GPU test skipping.

`tiny_model_dir` is written once per session; treat it as read-only (copy it before changing files in it).
"""

from __future__ import annotations

import pytest


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
    from engine.tiny import build

    return build(tmp_path_factory.mktemp("tiny-model") / "tiny-sdar")
