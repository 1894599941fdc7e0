"""Reward arithmetic on hand-made harness Reports: DICE's binary reward, the speed-aware bonus, group advantages,
and the curation verdict (CuKe's filter)."""

from __future__ import annotations

import math

import pytest

from dice_lsp.anatomy.types import Finding, Span
from dice_lsp.train.curate import verdict
from dice_lsp.train.rewards import SPEED_CAP, group_advantages, outcome
from dice_lsp.harness.report import Report

DECEPTION = Finding("timer-mismatch", "the timed forward does less work than the checked one", Span(0, 0), "error")
NOTE = Finding("precision", "the result is only close at a loose tolerance", Span(0, 0), "warning")


def report(status="correct", speedup=None, findings=()):
    return Report(status=status, speedup_eager=speedup, findings=tuple(findings))


@pytest.mark.parametrize("speedup, weight, reward", [
    (None, 0.0, 1.0),  # binary: built and correct
    (4.0, 0.0, 1.0),  # speed ignored without a weight (DICE)
    (4.0, 0.5, 1.0 + 0.5 * 2),  # log2(4) = 2
    (3.0, 0.25, 1.0 + 0.25 * math.log2(3)),
    (1.0, 0.5, 1.0),  # no faster than eager: no bonus
    (0.25, 0.5, 1.0),  # slower is clamped at 0, never below the correct reward
    (8.0, 1.0, 1.0 + SPEED_CAP),  # the cap: log2(8) = 3
    (1024.0, 1.0, 1.0 + SPEED_CAP),  # a suspicious 1000x earns no more than 8x
    (None, 0.5, 1.0),  # correct but untimed: the binary reward
])
def test_speed_aware_reward_of_correct_solutions(speedup, weight, reward):
    result = outcome(report("correct", speedup), weight)
    assert result.correct and result.status == "correct" and result.speedup == speedup
    assert result.reward == pytest.approx(reward, abs=1e-12)


def test_wrong_or_deceptive_solutions_earn_nothing_however_fast():
    for status in ("mismatch", "compile-error", "crashed", "timed-out", "invalid"):
        result = outcome(report(status, 16.0), 1.0)
        assert (result.reward, result.correct, result.status) == (0.0, False, status)
    cheat = outcome(report("correct", 16.0, [DECEPTION]), 1.0)
    assert (cheat.reward, cheat.correct, cheat.status) == (0.0, False, "deceptive")
    noted = outcome(report("correct", 2.0, [NOTE]), 1.0)  # a warning is not a deception
    assert (noted.reward, noted.correct) == (2.0, True)


def test_group_advantages_of_speed_aware_rewards():
    rewards = [outcome(report(*r), 0.5).reward for r in (("correct", 4.0), ("correct", 1.0), ("mismatch", 4.0),
                                                        ("mismatch", None))]
    assert rewards == [2.0, 1.0, 0.0, 0.0]
    mean, std = 0.75, math.sqrt((1.25**2 + 0.25**2 + 0.75**2 + 0.75**2) / 4)  # the population std
    assert group_advantages(rewards) == pytest.approx([(r - mean) / std for r in rewards])
    assert group_advantages([2.0, 2.0, 2.0]) is None  # equal rewards: the group is dropped


def test_curation_verdicts():
    assert verdict(report("correct", 3.0), 2.0) is None
    assert verdict(report("correct", 1.5), 2.0) == "speedup below 2x"
    assert verdict(report("correct", None), 2.0).startswith("no timing")
    assert verdict(report("correct", None), 0.0) is None  # --min-speedup 0: correctness alone
    assert verdict(report("mismatch", 9.0), 2.0) == "mismatch"
    assert verdict(report("correct", 9.0, [DECEPTION, NOTE]), 2.0) == "deceptive: timer-mismatch"
