"""CuKe's filter: keep the pairs whose solution builds, is correct, shows no deception and reaches a speedup.

Runs the harness in batch mode over a JSONL of {reference, solution}; says how many were dropped and why.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from dice_lsp.harness import Options, Report, check_each
from dice_lsp.train.data import read_pairs


@dataclass
class Curation:
    kept: int = 0
    total: int = 0
    reasons: dict[str, int] = field(default_factory=dict)  # why pairs were dropped, with counts
    lines: list[str] = field(default_factory=list)  # the kept records, JSONL lines with their speedup, in IN's order


def verdict(report: Report, min_speedup: float) -> str | None:
    """None to keep the pair, else the reason it is dropped."""
    if report.status != "correct":
        return report.status
    deceptions = sorted({f.code for f in report.findings if getattr(f, "severity", "") == "error"})
    if deceptions:
        return "deceptive: " + ", ".join(deceptions)
    if min_speedup > 0:
        if report.speedup_eager is None:
            return "no timing (speedup unknown; time on a GPU or use --min-speedup 0)"
        if report.speedup_eager < min_speedup:
            return f"speedup below {min_speedup:g}x"
    return None


def curate(source, min_speedup: float = 2.0, options: Options | None = None, workers: int | None = None,
           progress: bool = False) -> Curation:
    """Check every pair in batch mode (all built first, then each checked) and keep the ones that pass (`verdict`);
    `progress` shows a bar on stderr that moves as each check ends."""
    pairs = read_pairs(source)
    # model-written candidates: only inside the sandbox, never without it
    options = options or Options(baseline="eager" if min_speedup > 0 else "none", sandbox="require")
    reports: list[Report | None] = [None] * len(pairs)
    with tqdm(total=len(pairs), unit="pair", desc="building, then checking", disable=not progress,
              dynamic_ncols=True) as bar:
        for index, report in check_each([(p.reference, p.solution) for p in pairs], options, workers):
            reports[index] = report
            bar.set_description("checking")
            bar.update()
    result = Curation(total=len(pairs))
    raw_lines = [line for line in Path(source).read_text(encoding="utf-8").splitlines() if line.strip()]
    for raw, report in zip(raw_lines, reports):
        reason = verdict(report, min_speedup)
        if reason is not None:
            result.reasons[reason] = result.reasons.get(reason, 0) + 1
            continue
        record = json.loads(raw)
        record["speedup"] = report.speedup_eager
        result.lines.append(json.dumps(record) + "\n")
        result.kept += 1
    return result
