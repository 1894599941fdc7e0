"""Compile every task template's CUDA once through the harness in CPU mode (build, no run) and print a table:
the check that generated solutions at least build, without a GPU. Not run in CI (one build per template).

    python benchmarks/tasks_build.py [--seed 0] [--families norm softmax] [--workers 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dice_lsp.train.tasks import FAMILIES, render, templates  # noqa: E402
from dice_lsp.harness import Options, check_many  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--families", nargs="*", default=list(FAMILIES))
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args()
    tasks = [render(family, name, args.seed) for family in args.families for name in templates(family)]
    started = time.perf_counter()
    reports = check_many([(t.reference, t.solution) for t in tasks], Options(device="cpu"), args.workers)
    print(f"{'family':<11} {'template':<26} {'status':<15} {'build':<6} message")
    failed = 0
    for task, report in zip(tasks, reports):
        failed += report.status != "built-not-run"
        message = report.message.splitlines()[0][:70] if report.message else ""
        print(f"{task.family:<11} {task.template:<26} {report.status:<15} {report.build_mode:<6} {message}")
        if report.status != "built-not-run" and report.message:
            print(report.message[:3000])
    print(f"{len(tasks) - failed} of {len(tasks)} templates built in {time.perf_counter() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
