"""CPU timing stability: the honest C++ kernel's speedup over several checks while another CPU-heavy job runs.

The fixture is the harness tests' C++-only extension (`add_values`, a plain loop) against `a + b` on 512x512 inputs,
timed as `dice-lsp check --device cpu` times it. A busy process per core (a tight loop) runs the whole time, started
before the first check. Prints a table and appends a dated section with the machine's name to benchmarks/RESULTS.md.
Run it on two trees to compare (`PYTHONPATH=TREE python3 benchmarks/cpu_stability.py --label ...`).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = ROOT / "tests" / "harness" / "files"
BUSY = "while True:\n    pass\n"


def fixture() -> tuple[str, str]:
    solution = (FILES / "add_solution.py").read_text().replace("self.ext.FUNCTION(a, b)", "self.ext.add_values(a, b)")
    return (FILES / "add_reference.py").read_text(), solution


def bare_add_ms(seconds: float = 0.5) -> float:
    """The reference's op alone, in this process, on the same buffers each time: the median CPU time of `a + b`
    (one thread) over `seconds`. Nothing about it changes between calls of this function, so its spread over a run
    is the machine's own: how much the memory system beside the checks moved (other jobs, other tenants)."""
    import torch

    torch.set_num_threads(1)
    a, b = torch.randn(512, 512), torch.randn(512, 512)
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        started = time.thread_time()
        a + b
        times.append(time.thread_time() - started)
    return statistics.median(times) * 1e3


def spread(values: list[float]) -> float:
    """The largest deviation from the median, as a fraction of it."""
    mid = statistics.median(values)
    return max(abs(v / mid - 1) for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--checks", type=int, default=5)
    parser.add_argument("--busy", type=int, default=os.cpu_count() or 1, help="busy processes beside the checks")
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "dice-cpu-stability"))
    parser.add_argument("--label", default="", help="what tree this is, for the table (e.g. 'before', 'after')")
    parser.add_argument("--results", default=str(ROOT / "benchmarks" / "RESULTS.md"))
    args = parser.parse_args()
    from dice_lsp import harness  # the tree on PYTHONPATH

    reference, solution = fixture()
    options = harness.Options(cache_dir=args.cache, baseline="eager", device="cpu")
    first = harness.check(reference, solution, options)  # builds (or finds) the extension, before the load starts
    print(f"build: {first.summary()}", flush=True)
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.busy)]
    rows = []
    try:
        time.sleep(1.0)
        for i in range(args.checks):
            started = time.perf_counter()
            report = harness.check(reference, solution, options)
            seconds = time.perf_counter() - started
            rounds = {k: "/".join(f"{m:.3f}" for m in t.round_medians_ms) for k, t in report.timings.items()}
            bare = bare_add_ms()
            rows.append((report.speedup_eager, seconds, report.summary(), rounds, bare))
            errors = [f.message for f in report.findings if f.severity == "error"]
            print(f"#{i + 1}: {seconds:.1f} s, {report.summary()}; rounds {rounds}; bare a + b {bare:.3f} ms"
                  f"{'; ' if errors else ''}"
                  f"{' | '.join(errors)}", flush=True)
    finally:
        for process in busy:
            process.kill()
            process.wait()
    speedups = [r[0] for r in rows if r[0]]
    bare = [r[4] for r in rows]
    mid = statistics.median(speedups) if speedups else float("nan")
    line = (f"speedup over {len(speedups)} checks: {mid:.4f}x median, max deviation "
            f"{spread(speedups) if speedups else float('nan'):.1%} ({', '.join(f'{s:.4f}' for s in speedups)}); "
            f"the bare `a + b` after each check (the machine's own drift): max deviation {spread(bare):.1%} "
            f"({', '.join(f'{b:.3f}' for b in bare)} ms)")
    print(line)
    record(args, rows, line)


def record(args, rows, line: str) -> None:
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    table = ["| check | time | result | round medians (ms) | bare a + b (ms) |", "| --- | --- | --- | --- | --- |"]
    table += [f"| #{i + 1} | {seconds:.1f} s | {summary} | {rounds} | {bare:.3f} |"
              for i, (_s, seconds, summary, rounds, bare) in enumerate(rows)]
    with open(args.results, "a") as out:
        out.write(f"\n## CPU timing stability{' (' + args.label + ')' if args.label else ''}, {stamp}, "
                  f"{platform.node()} ({os.cpu_count()} cores), {args.busy} busy processes beside\n\n"
                  f"Fixture: tests/harness/files/add_solution.py `add_values` (a plain C++ loop) against "
                  f"add_reference.py (`a + b`, 512x512), `--device cpu`, default options.\n\n"
                  + "\n".join(table) + f"\n\n{line}\n")


if __name__ == "__main__":
    main()
