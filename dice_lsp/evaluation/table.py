"""The markdown table of an evaluation (as in the DICE paper's Table 6), rendered from metric rows.

Per-sample rows always; per-problem (pass@any) rows when problems have more than one sample; then outcome counts.
"""

from __future__ import annotations

from typing import Sequence

from dice_lsp.evaluation.metrics import Score

STATUS_ORDER = ("correct", "mismatch", "compile-error", "built-not-run", "crashed", "timed-out", "invalid", "cancelled")
BASELINE_NAMES = {"eager": "eager PyTorch", "compile": "torch.compile"}


def percent(value: float) -> str:
    return f"{100 * value:.1f}%"


def speedup(value: float | None, count: int) -> str:
    return "–" if value is None else f"{value:.2f}x ({count})"


def rows(scores: Sequence[Score], unit: str, thresholds: Sequence[float]) -> list[str]:
    head = ["Level", unit.capitalize(), "Check", "Exec", *(f"fast_{p:g}" for p in thresholds), "Geo-mean speedup (n)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in scores:
        if s.unit != unit:
            continue
        cells = [str(s.level), str(s.total), "robust" if s.robust else "plain", percent(s.exec_rate)]
        cells += [percent(s.fast_rate(p)) for p in thresholds]
        cells.append(speedup(s.geomean, s.timed))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render(title: str, scores: Sequence[Score], counts: dict[int, dict[str, int]], samples: int,
           baseline: str = "eager", thresholds: Sequence[float] = (1.0, 2.0)) -> str:
    """The whole markdown document; `samples` is the number of samples asked for per problem."""
    fast = ", ".join(f"fast_{p:g}" for p in thresholds)
    lines = [
        f"# {title}", "",
        f"Speedups against {BASELINE_NAMES.get(baseline, baseline)}. Exec: the fraction correct on every trial; "
        f"{fast}: the fraction correct with speedup > p, over all of them; the geometric mean is over the correct "
        "ones that were timed (n). **plain**: the harness's correctness; **robust**: also no static or run-time "
        "deception finding of severity warning or error.", "",
        f"## Per sample ({samples} sample{'s' if samples != 1 else ''} per problem, each counts once)", "",
    ]
    lines += rows(scores, "samples", thresholds)
    if samples > 1:
        lines += ["", f"## Per problem (pass@any: a problem passes if any of its {samples} samples does, at its best "
                  "passing speedup)", ""]
        lines += rows(scores, "problems", thresholds)
    lines += ["", "## Outcomes (samples per report status)", ""]
    seen = [s for s in STATUS_ORDER if any(s in c for c in counts.values())]
    seen += sorted({s for c in counts.values() for s in c} - set(STATUS_ORDER) - {"deceptive"})
    head = ["Level"] + seen + ["with deception findings"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for level, c in counts.items():
        lines.append("| " + " | ".join([str(level)] + [str(c.get(s, 0)) for s in seen] + [str(c.get("deceptive", 0))])
                     + " |")
    if any(c.get("built-not-run") for c in counts.values()):
        lines += ["", "Samples *built-not-run* compiled CUDA but no GPU was there to run them; they count as failures."]
    return "\n".join(lines) + "\n"
