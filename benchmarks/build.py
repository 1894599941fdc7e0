"""Build-speed benchmark: a plain cold load_inline build against the harness's light build, and an unchanged re-check.

Prints a table and appends a dated section with the machine's name to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import fixtures  # noqa: E402
from dice_lsp import harness  # noqa: E402

POOL = harness.WorkerPool()  # the benchmark's workers: re-checks reuse its kept reference worker, as the server's do


def unique(text: str, tag: str) -> str:
    """The CUDA fixture under a fresh extension name, so nothing is cached anywhere."""
    return text.replace("harness_cuda_add", f"bench_{tag}_{os.getpid()}_{int(time.time())}")


def plain_build(source: str) -> float:
    """Time the candidate module exactly as a user runs it: load_inline into an empty build directory."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "solution.py"
        path.write_text(source)
        env = {**os.environ, "TORCH_EXTENSIONS_DIR": directory}
        started = time.perf_counter()
        subprocess.run([sys.executable, str(path)], check=True, env=env, cwd=directory)
        return time.perf_counter() - started


def check_seconds(reference: str, solution: str, options) -> tuple[float, object]:
    started = time.perf_counter()
    report = harness.check(reference, solution, options, pool=POOL)
    return time.perf_counter() - started, report


def stages(report) -> str:
    """Where a check's seconds went, stage by stage (what to make faster next)."""
    return "stages: " + ", ".join(f"{s.name} {s.seconds:.2f} s" for s in report.stages)


def clocks(report) -> str:
    """Each side's median, interquartile range and trial count: what the speedup came from."""
    return "timings: " + ", ".join(
        f"{name} median {t.median_ms * 1e3:.2f} us (IQR {t.spread_ms * 1e3:.2f}, {t.trials} trials, "
        f"rounds {'/'.join(f'{m * 1e3:.2f}' for m in t.round_medians_ms)}, {t.slow_fraction:.0%} over 2x median, "
        f"{t.placements} placements, {t.rounds_left_out} rounds left out)"
        for name, t in report.timings.items())


def machine() -> str:
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20).stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        gpu = "no GPU"
    return f"{platform.node()} ({os.cpu_count()} cores, {gpu})"


def record(results: str, rows: list[tuple[str, float, str]], speedups: dict[str, list[float]],
           finished: bool, sandbox: str = "auto") -> None:
    lines = [f"| {name} | {seconds:.2f} s | {note} |" for name, seconds, note in rows]
    for size, values in speedups.items():
        if not values:
            continue
        mid = sorted(values)[len(values) // 2]
        spread = max(abs(s / mid - 1) for s in values)
        lines.append(f"| speedup over {len(values)} re-checks, {size} | {mid:.3f}x median | max deviation "
                     f"{spread:.1%} ({', '.join(f'{s:.3f}' for s in values)}) |")
        print(lines[-1], flush=True)
    if not lines:
        return
    table = "\n".join(["| what | time | result |", "| --- | --- | --- |", *lines])
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    cut = "" if finished else " The run was stopped before its end; these are the rows it finished.\n"
    with open(results, "a") as out:
        out.write(f"\n## harness build and re-check, {stamp}, {machine()}, sandbox {sandbox}\n\n"
                  f"Fixture: tests/harness/files/cuda_solution.py (one elementwise kernel) against "
                  f"add_reference.py (512x512 inputs; the re-checks marked with a larger size change only the "
                  f"reference's inputs, so the build is the same).{cut}\n\n{table}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cache", help="build cache to use and keep (default: a temporary one, removed after)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-plain", action="store_true", help="skip the (slow) plain build")
    parser.add_argument("--only-plain", action="store_true",
                        help="only the plain build (CPU only: a GPU session runs it beside a GPU-bound benchmark)")
    parser.add_argument("--pause", type=float, default=5.0,
                        help="seconds between re-checks, as between two saves: the spares that replace the "
                             "workers a check used are warm again by the next one")
    parser.add_argument("--large", type=int, default=4096,
                        help="also re-check with NxN inputs (0: skip): the spread of a forward longer than ~5 us")
    parser.add_argument("--slow", type=int, default=4864,
                        help="also re-check a compute-bound problem, NxN fp32 matmul plus add (~5 ms on an H200 at "
                             "4864), timed against eager and torch.compile as the server does (0: skip)")
    parser.add_argument("--fresh", type=int, default=2,
                        help="re-checks per size with the reference worker not kept, to compare against")
    parser.add_argument("--results", default=str(ROOT / "benchmarks" / "RESULTS.md"))
    parser.add_argument("--sandbox", default="auto", choices=("auto", "require", "off"),
                        help="run the workers in bubblewrap (require), as plain processes (off), or where it starts")
    args = parser.parse_args()
    reference, fixture = fixtures.add()
    cache = args.cache or tempfile.mkdtemp(prefix="dice-bench-")
    options = harness.Options(cache_dir=cache, baseline="eager", sandbox=args.sandbox)
    rows: list[tuple[str, float, str]] = []
    speedups: dict[str, list[float]] = {}

    def row(name: str, seconds: float, note: str) -> None:
        rows.append((name, seconds, note))
        print(f"| {name} | {seconds:.2f} s | {note} |", flush=True)  # as it comes: a cut run still tells

    # `timeout` (the device call's limit) sends SIGTERM: leave through `finally`, so the rows so far are recorded
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    finished = False
    try:
        if not args.no_plain:
            row("plain load_inline, cold", plain_build(unique(fixture, "plain")), "")
        if not args.only_plain:
            checks(reference, fixture, options, args, row, speedups)
        finished = True
    finally:
        POOL.close()
        record(args.results, rows, speedups, finished, args.sandbox)
    if not args.cache:
        shutil.rmtree(cache, ignore_errors=True)


def checks(reference: str, fixture: str, options, args, row, speedups: dict[str, list[float]]) -> None:
    """Cold checks (precompiled header to build, then built), then unchanged re-checks a save's pause apart, with the
    reference's 512x512 inputs and then with larger ones. A re-check reuses the reference worker of the check before
    (kept by the benchmark's `POOL`); `--fresh` more re-checks per size start a new one each time, for comparison."""
    pool = POOL
    seconds, report = check_seconds(reference, unique(fixture, "first"), options)
    row("check, cold, precompiled header not built yet", seconds, report.summary())
    solution = unique(fixture, "second")
    seconds, report = check_seconds(reference, solution, options)
    row("check, cold (header built)", seconds, f"{report.build_mode}; {report.summary()}")
    pool.keep_warm()
    harness.check(reference, solution, options, pool=pool)  # starts the spares
    time.sleep(5)
    sizes = [512] + ([args.large] if args.large else [])
    for size in sizes:
        text = reference.replace("512, 512", f"{size}, {size}")
        label = f"{size}x{size}"
        speedups[label] = []
        for i in range(args.repeats):
            if i or size != sizes[0]:
                time.sleep(args.pause)
            seconds, report = check_seconds(text, solution, options)
            row(f"re-check unchanged, warm workers #{i + 1}, {label}", seconds,
                f"{report.summary()}; {stages(report)}; {clocks(report)}")
            if report.speedup_eager:
                speedups[label].append(report.speedup_eager)
        kept, pool.kept_references = pool.kept_references, 0  # the baseline: a new reference worker each time
        pool.close_references()
        try:
            for i in range(args.fresh):
                time.sleep(args.pause)
                seconds, report = check_seconds(text, solution, options)
                row(f"re-check unchanged, reference worker not kept #{i + 1}, {label}", seconds,
                    f"{report.summary()}; {stages(report)}; {clocks(report)}")
        finally:
            pool.kept_references = kept
    if args.slow:
        slow(solution, options, args, row, speedups)


def slow(solution: str, options, args, row, speedups: dict[str, list[float]]) -> None:
    """Re-checks of a forward of milliseconds, baseline `both` (the server's default): at least 100 trials a side,
    so the timing alone is over 1.5 s at 5 ms a forward."""
    size = args.slow
    reference, solution = fixtures.matmul(size, solution)  # the extension the cold checks built: nothing to build
    label = f"{size}x{size} matmul, eager and compile"
    speedups[label] = []
    both = options.with_(baseline="both")
    for i in range(args.repeats + 1):
        time.sleep(args.pause)
        seconds, report = check_seconds(reference, solution, both)
        name = "first check of this reference (torch.compile)" if i == 0 else f"re-check unchanged #{i}"
        row(f"{name}, {label}", seconds, f"{report.summary()}; {stages(report)}; {clocks(report)}")
        if i and report.speedup_eager:
            speedups[label].append(report.speedup_eager)


if __name__ == "__main__":
    main()
