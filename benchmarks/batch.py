"""Batch-mode benchmark: N distinct cold extensions checked one by one, then the same number through check_many.

Goal (issue 3): batch mode builds N candidates in about N / cores x one build. Prints a table and appends a dated
section with the machine's name to benchmarks/RESULTS.md. Runs on CPU (C++ extensions) or on a GPU machine.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from dice_lsp import harness  # noqa: E402

FILES = ROOT / "tests" / "harness" / "files"


def variants(tag: str, count: int) -> list[str]:
    """The C++ fixture under `count` fresh extension names: each one a cold build."""
    text = (FILES / "add_solution.py").read_text().replace("return self.ext.FUNCTION(a, b)",
                                                           "return self.ext.add_values(a, b)")
    stamp = f"{os.getpid()}_{int(time.time())}"
    return [text.replace('name="harness_fixture"', f'name="batch_{tag}_{i}_{stamp}"') for i in range(count)]


def main() -> None:
    from build import machine

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=2 * (os.cpu_count() or 1))
    parser.add_argument("--results", default=str(ROOT / "benchmarks" / "RESULTS.md"))
    args = parser.parse_args()
    reference = (FILES / "add_reference.py").read_text()
    options = harness.Options(cache_dir=tempfile.mkdtemp(prefix="dice-batch-"), baseline="none", device="cpu",
                              timing_trials=10, warmup_trials=1)
    harness.check(reference, variants("warm", 1)[0], options)  # builds the shared precompiled header once

    started = time.perf_counter()
    single = [harness.check(reference, s, options) for s in variants("single", args.count)]
    single_s = time.perf_counter() - started
    one_build = sum(r.durations.get("build", 0.0) for r in single) / len(single)

    started = time.perf_counter()
    batch = harness.check_many([(reference, s) for s in variants("batch", args.count)], options)
    batch_s = time.perf_counter() - started
    statuses = {r.status for r in single + batch}

    cores = os.cpu_count() or 1
    ideal = args.count / cores * one_build
    rows = [
        ("one cold build (mean of the single checks' build stage)", f"{one_build:.1f} s"),
        (f"{args.count} checks one by one", f"{single_s:.1f} s"),
        (f"{args.count} checks through check_many ({cores} cores)", f"{batch_s:.1f} s"),
        ("N / cores x one build", f"{ideal:.1f} s"),
        ("check_many / (N / cores x one build)", f"{batch_s / ideal:.2f}"),
        ("statuses", ", ".join(sorted(statuses))),
    ]
    table = "\n".join(["| what | value |", "| --- | --- |", *(f"| {a} | {b} |" for a, b in rows)])
    print(table)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    with open(args.results, "a") as out:
        out.write(f"\n## harness batch mode, {stamp}, {machine()}\n\n`python benchmarks/batch.py --count "
                  f"{args.count}`: distinct C++-only extensions (tests/harness/files/add_solution.py renamed), "
                  f"light build with the precompiled header already built, CPU checks.\n\n{table}\n")


if __name__ == "__main__":
    main()
