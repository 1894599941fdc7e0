"""How a check's trials are run: all in one call of the solution's worker, or a few a call when they do not fit
the GPU together, and the calls' answers merged back into one.
"""

from __future__ import annotations

import dataclasses

from dice_lsp.harness.messages import Compared, Ran, ReferenceMade
from dice_lsp.harness.options import Options

SOLUTION_SHARE = 0.6  # of the GPU's memory, what the solution's worker may hold with every trial's outputs at once
ONE_TRIAL_AT_LEAST = 3  # a trial a call still holds its inputs and outputs on each side, and copies of the inputs
HELD_PER_TRIAL = 4  # inputs the solution's worker holds besides each trial's outputs: the first trial, its copies, bases


def trial_groups(made: ReferenceMade | None, options: Options) -> list[tuple[tuple[int, ...] | None, bool]]:
    """The solution's trials, as the calls that run them: (trials, and the changed inputs too?). One call for all
    of them, unless `options.trials_at_once` says fewer or the reference worker's sizes say they would not fit
    together on the GPU (one trial's inputs and outputs, times the trials and what else is held, past
    SOLUTION_SHARE of its memory): then a trial a call, each call's outputs compared before the next."""
    count = options.correctness_trials
    at_once = options.trials_at_once
    if not at_once and made is not None and made.device_bytes and \
            made.trial_bytes * (count + HELD_PER_TRIAL) > SOLUTION_SHARE * made.device_bytes:
        at_once = 1
    if not at_once or at_once >= count:
        return [(None, True)]
    return [(tuple(range(i, min(i + at_once, count))), False) for i in range(0, count, at_once)] + [((), True)]


def merged_runs(rans: list[Ran]) -> Ran:
    """One Ran for the calls of one check: what any call saw, in call order."""
    if len(rans) == 1:
        return rans[0]
    return dataclasses.replace(
        rans[-1], changed_tensors=sum(r.changed_tensors for r in rans),
        threads=tuple(t for r in rans for t in r.threads), precision_before=rans[0].precision_before,
        outputs="shared" if all(r.outputs == "shared" for r in rans) else "file",
        mutated=tuple(sorted({i for r in rans for i in r.mutated})), lazy=next((r.lazy for r in rans if r.lazy), ""),
        tampered=tuple(dict.fromkeys(t for r in rans for t in r.tampered)))


def merged_comparisons(compares: list[Compared]) -> Compared:
    if len(compares) == 1:
        return compares[0]
    return dataclasses.replace(compares[-1], trials=tuple(t for c in compares for t in c.trials),
                               reference_norm=max(c.reference_norm for c in compares))
