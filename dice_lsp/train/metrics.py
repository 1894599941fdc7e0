"""What a run reports: one JSON line per step in metrics.jsonl and PNG plots of loss and reward drawn from it.

On resume, lines past the checkpoint's step are dropped, so the file always describes one consistent run.
"""

from __future__ import annotations

import json
from pathlib import Path


class MetricsLog:
    def __init__(self, out_dir: Path, resume_step: int, enabled: bool = True):
        self.path = Path(out_dir) / "metrics.jsonl"
        self.enabled = enabled
        if enabled and self.path.exists():
            kept = [line for line in self.path.read_text().splitlines()
                    if line.strip() and json.loads(line).get("step", 0) <= resume_step]
            self.path.write_text("".join(line + "\n" for line in kept))

    def write(self, record: dict) -> None:
        if self.enabled:
            with self.path.open("a") as sink:
                sink.write(json.dumps(record, sort_keys=True) + "\n")

    def records(self) -> list[dict]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]

    def plot(self) -> list[Path]:
        """loss.png and, when rewards were logged, reward.png beside metrics.jsonl."""
        if not self.enabled:
            return []
        import matplotlib  # here, not at the top: about a second to import, paid only when a run ends

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        records = self.records()
        drawn = []
        for name, keys in (("loss", ("loss",)), ("reward", ("reward", "correct"))):
            series = {k: [(r["step"], r[k]) for r in records if r.get(k) is not None] for k in keys}
            if not any(series.values()):
                continue
            figure, axes = plt.subplots(figsize=(6, 3.5))
            for key, points in series.items():
                if points:
                    axes.plot([p[0] for p in points], [p[1] for p in points], label=key)
            axes.set_xlabel("step")
            axes.set_ylabel(name)
            axes.legend()
            axes.grid(alpha=0.3)
            figure.tight_layout()
            target = self.path.with_name(f"{name}.png")
            figure.savefig(target, dpi=100)
            plt.close(figure)
            drawn.append(target)
        return drawn
