"""Engine tests run a tiny model: one intra-op thread is faster for its small matmuls, and far faster when the
machine's cores are busy (OpenMP threads spin waiting for each other)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
