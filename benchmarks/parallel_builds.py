"""Task templates' CUDA builds one at a time, then all at once on every core: the build phase of the GPU tests
(tests/train/test_tasks.py, test_bundled.py) measured on its own. Prints a table; appends it to RESULTS.md.

Each pass starts from an empty build cache whose precompiled torch header is built first (not counted), so every
build is a cold light build (or its plain fall-back), as on a fresh GPU machine after `harness.prepare`.

    python benchmarks/parallel_builds.py [--count 8] [--parallel 2] [--results benchmarks/RESULTS.md]
"""

from __future__ import annotations

import argparse
import datetime
import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from dice_lsp import harness  # noqa: E402
from dice_lsp.harness.batch import Pipeline  # noqa: E402
from dice_lsp.train.tasks import FAMILIES, render, templates  # noqa: E402


def children_cpu_s() -> float:
    """CPU seconds of every finished descendant (workers wait for their compilers, so theirs count too)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def spread(count: int) -> list[tuple[str, str]]:
    """`count` (family, template) pairs spread over the families, one template a family before any second."""
    rounds = [[(family, name) for family in FAMILIES for name in templates(family)[i:i + 1]] for i in range(8)]
    return [pair for one_round in rounds for pair in one_round][:count]


def build_pass(pairs: list[tuple[str, str]], workers: int) -> dict:
    """Build every pair's solution, `workers` at a time, into a fresh cache; the builds' wall and CPU seconds, each
    build's own seconds and mode. The checks that read the modes afterwards (CPU, built-not-run) are not counted."""
    cache = tempfile.mkdtemp(prefix="dice-parallel-builds-")
    options = harness.Options(device="cpu", cache_dir=os.path.join(cache, "extensions"), baseline="none")
    harness.prepare(options)
    tasks = [render(family, name, 0) for family, name in pairs]
    ended = threading.Event()
    finished: list[float] = []

    def on_event(event) -> None:
        if event.kind == "build-end":
            finished.append(time.perf_counter())
            if len(finished) == len(tasks):
                ended.set()

    cpu, started = children_cpu_s(), time.perf_counter()
    with Pipeline(options, workers, on_event=on_event) as pipeline:
        number = pipeline.submit([(t.reference, t.solution) for t in tasks])
        ended.wait(3600)  # a build that raised past the pipeline tells no end: give up on the count
        wall, cpu = max(finished) - started, children_cpu_s() - cpu
        checked = sorted(pipeline.results(number), key=lambda c: c.index)
    return {"wall": wall, "cpu": cpu, "builds": [c.build_s for c in checked],
            "modes": [f"{c.report.build_mode or c.report.status}" for c in checked],
            "names": [f"{t.family}/{t.template}" for t in tasks]}


def main() -> int:
    from build import machine

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=8, help="templates to build in each pass")
    parser.add_argument("--parallel", type=int, default=os.cpu_count() or 1, help="builds at a time, second pass")
    parser.add_argument("--results", default="", help="append the table to this file (RESULTS.md)")
    args = parser.parse_args()
    pairs = spread(args.count)
    load = os.getloadavg()[0]
    serial = build_pass(pairs, 1)
    parallel = build_pass(pairs, args.parallel)
    rows = [("one at a time", serial), (f"{args.parallel} at a time", parallel)]
    lines = ["| builds | wall | CPU (all processes) | mean build | builds' modes |", "| --- | --- | --- | --- | --- |"]
    for label, run in rows:
        modes = ", ".join(f"{m} {run['modes'].count(m)}" for m in sorted(set(run["modes"])))
        lines.append(f"| {args.count}, {label} | {run['wall']:.1f} s | {run['cpu']:.1f} s | "
                     f"{sum(run['builds']) / len(run['builds']):.1f} s | {modes} |")
    each = ", ".join(f"{name} {s:.0f}/{p:.0f} s" for name, s, p in
                     zip(serial["names"], serial["builds"], parallel["builds"]))
    table = "\n".join(lines)
    notes = (f"Parallel / serial wall: {parallel['wall'] / serial['wall']:.2f}. Load average before: {load:.1f}. "
             f"Each build (serial / parallel): {each}.")
    print(table + "\n\n" + notes)
    if args.results:
        when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        with open(args.results, "a") as out:
            out.write(f"\n## task templates' builds, one at a time and {args.parallel} at a time, {when}, "
                      f"{machine()}\n\n`python benchmarks/parallel_builds.py --count {args.count} --parallel "
                      f"{args.parallel}`: cold light builds into an empty cache (its precompiled header built "
                      f"first, not counted).\n\n{table}\n\n{notes}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
