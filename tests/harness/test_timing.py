"""The timing loop's trial count: the minimum always, more for a short forward until the time budget is spent."""

import time

import torch

from harness import timing


def test_a_slow_forward_gets_exactly_the_minimum_trials():
    result = timing.measure(lambda: time.sleep(0.002), torch.device("cpu"), trials=7, warmup=1, budget_s=0.0)
    assert result["trials"] == 7 and result["clock"] == "host"
    assert 2.0 <= result["median_ms"] < 50.0


def test_a_short_forward_gets_more_trials_up_to_ten_times_the_minimum():
    calls = []
    result = timing.measure(lambda: calls.append(1), torch.device("cpu"), trials=5, warmup=2, budget_s=10.0)
    assert result["trials"] == 50 and len(calls) == 52  # warm-up, then the cap of 10 x trials


def test_the_budget_ends_the_extra_trials():
    result = timing.measure(lambda: time.sleep(0.01), torch.device("cpu"), trials=3, warmup=1, budget_s=0.1)
    assert 3 < result["trials"] < 30
