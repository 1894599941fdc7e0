"""Issue 25's eval goal: `dice-lsp eval` over a level of N problems like tests/fixtures/big_problems with known-correct
solutions, cold build cache, <= 20 min for 100 on the H200 machine.

The level: the four kinds in turn (elementwise, row reduction, reduction over a middle dim, normalisation), each
problem at a size of its own between 6 and 9 GB of float32 input, and each solution the kind's CUDA solution under an
extension name of its own, so every problem is a cold build, as a model's kernels are. Written in KernelBench layout
(PROBLEMS/level1/N_kind.py, SOLUTIONS/level1/N_kind.py), then `dice-lsp eval --solutions` runs in a subprocess with a
fresh DICE_LSP_CACHE; the numbers come from its samples.jsonl (each record's build_s and check_s) and the clock.
Prints a table and appends it with the date and machine to RESULTS.md (not with --tiny).

    python3 benchmarks/big_eval.py --count 100                         # the goal (GPU)
    python3 benchmarks/big_eval.py --count 4 --tiny --device cpu       # tiny twins, C++ solutions: the script runs

Where one command may run only so long (the device machine's 10 minutes), `--work DIR --limit S` stops eval with
SIGTERM after S seconds, and the same command again resumes it (eval's own resume: finished samples are kept, the
checks in flight run again); the wall times of the runs are added up, so a resumed run counts its restarts too.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
from big_problems import PROBLEMS, cpu_solution, cuda_solution, reference, sized  # noqa: E402

GOAL_S_PER_100 = 20 * 60.0


def write_level(root: Path, count: int, tiny: bool) -> int:
    """The problems and their solutions under `root`; returns the bytes of input one trial of all of them makes."""
    names = sorted(PROBLEMS)
    stamp = f"{os.getpid()}_{int(time.time())}"  # fresh extension names: cold builds even in a warm cache
    total = 0
    for i in range(count):
        name = names[i % len(names)]
        shape = sized(name, (i // len(names)) / max(1, (count - 1) // len(names)), tiny)
        total += PROBLEMS[name].input_bytes(shape)
        file = f"level1/{i + 1}_{name}.py"
        extension = f"big_{name}_{i}_{stamp}"
        text = cpu_solution(name, extension) if tiny else cuda_solution(name, extension)
        for folder, content in (("problems", reference(name, shape)), ("solutions", text)):
            path = root / folder / file
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content.replace(f"# dice: reference = {name}.py\n", ""))
    return total


def main() -> None:
    from build import machine

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--tiny", action="store_true", help="the tiny twins with C++ solutions (any machine)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--sandbox", default="auto", choices=("auto", "require", "off"),
                        help="eval's own default is require; auto runs where bubblewrap cannot start too")
    parser.add_argument("--batch", type=int, default=16, help="eval's --batch")
    parser.add_argument("--work", help="folder for the level, the cache and eval's output (default: a fresh one)")
    parser.add_argument("--limit", type=float, default=3600.0,
                        help="seconds before eval is stopped (SIGTERM); the same command resumes it")
    parser.add_argument("--results", default=str(ROOT / "benchmarks" / "RESULTS.md"))
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="dice-big-eval-"))
    level = work / "level.json"  # what an earlier run of this command wrote: the level, and the time spent so far
    if level.is_file():
        state = json.loads(level.read_text())
        if (state["count"], state["tiny"]) != (args.count, args.tiny):
            sys.exit(f"{work} holds a level of {state['count']} (tiny: {state['tiny']}); give another --work")
    else:
        state = {"count": args.count, "tiny": args.tiny, "inputs": write_level(work, args.count, args.tiny),
                 "wall": 0.0, "runs": 0}
    command = [sys.executable, "-m", "dice_lsp", "eval", str(work / "problems"), "--solutions",
               str(work / "solutions"), "--out", str(work / "out"), "--device", args.device, "--sandbox",
               args.sandbox, "--batch", str(args.batch), "--json"]
    env = {**os.environ, "DICE_LSP_CACHE": str(work / "cache")}  # cold: no build, no precompiled header
    started = time.perf_counter()
    with open(work / "eval.log", "a") as log:
        running = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            ended = f"exit {running.wait(timeout=args.limit)}"
        except subprocess.TimeoutExpired:
            running.terminate()  # eval ends its workers and compilers on SIGTERM; its records stay
            ended = f"stopped after {args.limit:.0f} s (exit {running.wait()}); run the same command to resume"
    state["wall"] += time.perf_counter() - started
    state["runs"] += 1
    level.write_text(json.dumps(state))
    wall, inputs = state["wall"], state["inputs"]
    lines = (work / "out" / "samples.jsonl").read_text().splitlines() if (work / "out" / "samples.jsonl").is_file() \
        else []
    records = [json.loads(line) for line in lines if line.strip().endswith("}")]
    statuses = collections.Counter(r["report"]["status"] for r in records)
    builds = sum(r.get("build_s", 0.0) for r in records)
    checks = [r.get("check_s", 0.0) for r in records]
    goal = GOAL_S_PER_100 * args.count / 100
    rows = [
        ("problems", f"{args.count} ({', '.join(sorted(PROBLEMS))} in turn), {inputs / 1e9:.1f} GB of inputs a trial "
                     "in all"),
        ("eval", f"{ended}; {state['runs']} run(s)"),
        ("wall time, cold build cache", f"{wall:.0f} s = {wall / max(1, args.count):.1f} s a problem; goal "
                                        f"<= {goal:.0f} s ({GOAL_S_PER_100 / 100:.0f} s a problem): "
                                        f"{'met' if wall <= goal and len(records) == args.count else 'NOT met'}"),
        ("statuses", ", ".join(f"{s} {n}" for s, n in statuses.most_common()) or "no records"),
        ("builds (sum of build_s, run in parallel)", f"{builds:.0f} s"),
        ("checks (sum of check_s, one at a time a GPU)",
         f"{sum(checks):.0f} s; mean {sum(checks) / max(1, len(checks)):.1f} s, max {max(checks, default=0):.1f} s"),
        ("wall time not covered by checks", f"{wall - sum(checks):.0f} s"),
    ]
    table = "\n".join(["| what | value |", "| --- | --- |", *(f"| {a} | {b} |" for a, b in rows)])
    print(table)
    print(f"\nlevel, cache, output and eval.log in {work}")
    if args.tiny or not ended.startswith("exit"):
        return
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    with open(args.results, "a") as out:
        out.write(f"\n## big problems: eval of {args.count}, cold cache (issue 25), {stamp}, {machine()}\n\n"
                  f"`python3 benchmarks/big_eval.py --count {args.count} --sandbox {args.sandbox} --batch "
                  f"{args.batch}` in {state['runs']} run(s): eval's defaults otherwise (5 trials, 100 timed, "
                  f"against eager).\n\n{table}\n")


if __name__ == "__main__":
    main()
