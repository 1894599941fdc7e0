"""Rewards of rollouts from harness Reports, and BiC-RL's group advantages (z-scores within each task's group).

Binary as in DICE (built and correct); optionally plus a speed bonus, the piece the paper names as missing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dice_lsp.harness import Options, Report, check_many

SPEED_CAP = 3.0  # log2 speedup counted at most (8x)

# How rollouts are checked unless told otherwise: one correctness trial is enough for a 0/1 reward, and nothing is
# timed (RLConfig asks for eager timings when a speed bonus is paid).
# RL's candidates are optimised against this reward: they run only inside the sandbox, never without it
REWARD_CHECKS = Options(correctness_trials=1, baseline="none", sandbox="require")


@dataclass(frozen=True)
class Outcome:
    reward: float
    correct: bool
    status: str
    speedup: float | None = None


def outcome(report: Report, speed_weight: float = 0.0) -> Outcome:
    """1 when the solution built and matched the reference with no error-severity finding (a deception), else 0;
    with speed_weight w, correct ones get + w * clamp(log2(speedup), 0, 3)."""
    deceptive = any(getattr(f, "severity", "") == "error" for f in report.findings)
    correct = report.status == "correct" and not deceptive
    reward = 1.0 if correct else 0.0
    speedup = report.speedup_eager
    if correct and speed_weight and speedup:
        reward += speed_weight * min(max(math.log2(speedup), 0.0), SPEED_CAP)
    return Outcome(reward, correct, report.status if not (report.status == "correct" and deceptive) else "deceptive",
                   speedup)


def group_advantages(rewards: list[float]) -> list[float] | None:
    """(r - mean) / std with the population std; None when every reward is equal (nothing to learn)."""
    mean = sum(rewards) / len(rewards)
    var = sum((r - mean) ** 2 for r in rewards) / len(rewards)
    if var <= 1e-12:
        return None
    std = math.sqrt(var)
    return [(r - mean) / std for r in rewards]


def judge(references: list[str], solutions: list[str | None], options: Options) -> list[Report]:
    """Harness Reports for each (reference, solution) in batch mode; a missing solution is a failed report."""
    todo = [(i, r, s) for i, (r, s) in enumerate(zip(references, solutions)) if s]
    reports = check_many([(r, s) for _, r, s in todo], options) if todo else []
    out = [Report(status="invalid", message="no code in the answer")] * len(solutions)
    for (i, _, _), report in zip(todo, reports):
        out[i] = report
    return out
