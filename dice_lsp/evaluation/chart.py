"""A bar chart (PNG) of Exec, fast_1 and fast_2 per level, plain beside robust, from the same rows as the table.

matplotlib runs headless (Agg) and is imported only here, so the rest of eval does not pay for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from dice_lsp.evaluation.metrics import Score


def draw(scores: Sequence[Score], path: Path, title: str, thresholds: Sequence[float] = (1.0, 2.0)) -> Path:
    """Per-sample rows as grouped bars: one group per level and metric, plain (solid) beside robust (hatched)."""
    import matplotlib  # here, not at the top: about a second to import, paid only when a chart is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = ["Exec"] + [f"fast_{p:g}" for p in thresholds]
    levels = sorted({s.level for s in scores})
    pick = {(s.level, s.robust): s for s in scores if s.unit == "samples"}
    figure, axes = plt.subplots(figsize=(max(4.0, 2.6 * len(levels) + 1.5), 3.6))
    width = 0.8 / (2 * len(metrics))
    colors = ["#4C72B0", "#55A868", "#C44E52", "#8172B2", "#CCB974"]
    for m, metric in enumerate(metrics):
        for robust in (False, True):
            values = []
            for level in levels:
                s = pick.get((level, robust))
                rate = 0.0 if s is None else s.exec_rate if m == 0 else s.fast_rate(thresholds[m - 1])
                values.append(100 * rate)
            offset = (2 * m + robust - len(metrics) + 0.5) * width
            bars = axes.bar([i + offset for i in range(len(levels))], values, width, color=colors[m % len(colors)],
                            hatch="//" if robust else None, edgecolor="white" if robust else None,
                            label=f"{metric} ({'robust' if robust else 'plain'})")
            axes.bar_label(bars, fmt="%.0f", fontsize=6, padding=1)  # so a zero is seen as a zero, not a gap
    axes.set_xticks(range(len(levels)), [f"Level {level}" for level in levels])
    axes.set_ylabel("% of samples")
    axes.set_ylim(0, 110)
    axes.set_title(title, fontsize=10)
    axes.legend(fontsize=7, ncol=len(metrics), loc="upper right")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
