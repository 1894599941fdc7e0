"""Issue 25's check goals on our big problems (tests/fixtures/big_problems: one float32 input of 6-9 GB each).

For each problem: its solution built first (the build cache filled, the build excluded from the goals), then a cold
check (fresh workers, nothing kept) <= 15 s, a re-check of the same pair (the reference worker kept) <= 5 s, and the
peak host memory of the cold check, the caller and every process under it, <= 2x one trial's inputs. Host memory is
read from /proc every 20 ms: the sum of each process's VmHWM (its own peak, whenever it came: an upper bound, which
counts shared libraries once a process) and the highest sum of VmRSS seen at one time (a lower bound). Prints a table
and appends it with the date and machine to RESULTS.md (not with --tiny).

    python3 benchmarks/big_check.py                        # the goal's problem: mid_logsumexp, 8.59 GB (GPU)
    python3 benchmarks/big_check.py --problems all         # all four
    python3 benchmarks/big_check.py --tiny --device cpu    # the tiny twins and C++ solutions: the script runs
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
from big_problems import PROBLEMS, cpu_solution, cuda_solution, reference  # noqa: E402

from dice_lsp import harness  # noqa: E402
from dice_lsp.harness.batch import prebuild  # noqa: E402

GOAL_CHECK_S, GOAL_RECHECK_S, GOAL_HOST_RATIO = 15.0, 5.0, 2.0


def _status(pid: int) -> dict[str, int]:
    """VmHWM and VmRSS of `pid` in bytes; empty when it has ended."""
    found = {}
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(("VmHWM:", "VmRSS:")):
                    name, value = line.split(":", 1)
                    found[name] = int(value.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    return found


def _descendants(root: int) -> set[int]:
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parents.setdefault(parent, []).append(int(entry))
    found, todo = {root}, [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


class HostMemory:
    """The caller's process tree's host memory while the block runs, sampled on a thread."""

    def __init__(self, every: float = 0.02) -> None:
        self.every = every
        self.hwm: dict[int, int] = {}  # pid -> its VmHWM at the last sample that saw it
        self.names: dict[int, str] = {}
        self.rss_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> HostMemory:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self._sample()

    def _sample(self) -> None:
        rss = 0
        for pid in _descendants(os.getpid()):
            found = _status(pid)
            if not found:
                continue
            rss += found.get("VmRSS", 0)
            self.hwm[pid] = max(self.hwm.get(pid, 0), found.get("VmHWM", 0))
            if pid not in self.names:
                try:
                    self.names[pid] = Path(f"/proc/{pid}/comm").read_text().strip()
                except OSError:
                    self.names[pid] = "?"
        self.rss_peak = max(self.rss_peak, rss)

    @property
    def hwm_sum(self) -> int:
        return sum(self.hwm.values())

    def largest(self) -> str:
        pid = max(self.hwm, key=self.hwm.get)
        return f"{self.names.get(pid, '?')} {gb(self.hwm[pid])}"


def gb(value: float) -> str:
    return f"{value / 1e9:.2f} GB"


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def measure(name: str, options: harness.Options, tiny: bool) -> list[tuple[str, str]]:
    problem = PROBLEMS[name]
    shape = problem.tiny if tiny else problem.shape
    ref = reference(name, shape if tiny else None)
    solution = cpu_solution(name) if tiny else cuda_solution(name)
    inputs = problem.input_bytes(shape)

    started = time.perf_counter()
    if options.device != "cpu":
        try:
            harness.prepare(options)
        except harness.HarnessError as error:
            print(f"precompiled header: {error}", file=sys.stderr)
    prebuild([solution], options)
    build_s = time.perf_counter() - started

    pool = harness.WorkerPool()
    pool.keep_warm()  # as the editor keeps workers: the re-check finds the reference worker kept
    try:
        with HostMemory() as memory:
            started = time.perf_counter()
            cold = harness.check(ref, solution, options, pool=pool)
            cold_s = time.perf_counter() - started
        with HostMemory() as again:
            started = time.perf_counter()
            recheck = harness.check(ref, solution, options, pool=pool)
            recheck_s = time.perf_counter() - started
    finally:
        pool.close()
    stages = ", ".join(f"{stage} {seconds:.1f}" for stage, seconds in cold.durations.items())
    restages = ", ".join(f"{stage} {seconds:.1f}" for stage, seconds in recheck.durations.items())
    ratio = memory.hwm_sum / inputs
    return [
        ("problem", f"{name} ({problem.kind}), input {'x'.join(map(str, shape))} float32"),
        ("one trial's inputs", gb(inputs)),
        ("build (excluded; cache filled first)", f"{build_s:.1f} s"),
        ("cold check", f"{cold_s:.1f} s, goal <= {GOAL_CHECK_S:g} s: {verdict(cold_s <= GOAL_CHECK_S)}"),
        ("cold check: status and stages (s)", f"{cold.status} {cold.message[:200]}; {stages}".strip()),
        ("re-check", f"{recheck_s:.1f} s, goal <= {GOAL_RECHECK_S:g} s: {verdict(recheck_s <= GOAL_RECHECK_S)}"),
        ("re-check: status and stages (s)", f"{recheck.status} {recheck.message[:200]}; {restages}".strip()),
        ("cold check: host peak, sum of VmHWM (upper bound)",
         f"{gb(memory.hwm_sum)} = {ratio:.2f}x inputs, goal <= {GOAL_HOST_RATIO:g}x: "
         f"{verdict(ratio <= GOAL_HOST_RATIO)}"),
        ("cold check: host peak, highest sum of VmRSS (lower bound)",
         f"{gb(memory.rss_peak)} = {memory.rss_peak / inputs:.2f}x inputs"),
        ("cold check: processes seen, the largest", f"{len(memory.hwm)}, {memory.largest()}"),
        ("re-check: host peak, highest sum of VmRSS", f"{gb(again.rss_peak)}"),
        ("speedup vs eager (cold, re-check)", f"{cold.speedup_eager}, {recheck.speedup_eager}"),
    ]


def main() -> None:
    from build import machine

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", default="mid_logsumexp", help=f"comma-separated, or all: {', '.join(PROBLEMS)}")
    parser.add_argument("--tiny", action="store_true", help="the tiny twins with the C++ solutions (any machine)")
    parser.add_argument("--device", default="auto", help="auto, cuda or cpu (--tiny needs cpu)")
    parser.add_argument("--cache", help="build cache (default: a fresh temporary one)")
    parser.add_argument("--baseline", default="eager", choices=("eager", "compile", "both", "none"))
    parser.add_argument("--results", default=str(ROOT / "benchmarks" / "RESULTS.md"))
    args = parser.parse_args()
    names = list(PROBLEMS) if args.problems == "all" else args.problems.split(",")
    cache = args.cache or tempfile.mkdtemp(prefix="dice-big-check-")
    options = harness.Options(cache_dir=cache, device=args.device, baseline=args.baseline, run_timeout=600.0,
                              build_timeout=1200.0)
    sections = []
    for name in names:
        rows = measure(name, options, args.tiny)
        table = "\n".join(["| what | value |", "| --- | --- |", *(f"| {a} | {b} |" for a, b in rows)])
        print(table + "\n", flush=True)
        sections.append(table)
    if args.tiny:
        return
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    with open(args.results, "a") as out:
        out.write(f"\n## big problems: check, re-check, host memory (issue 25), {stamp}, {machine()}\n\n"
                  f"`python3 benchmarks/big_check.py --problems {args.problems} --baseline {args.baseline}`: "
                  "tests/fixtures/big_problems, default options otherwise (5 trials, 100 timed).\n\n"
                  + "\n\n".join(sections) + "\n")


if __name__ == "__main__":
    main()
