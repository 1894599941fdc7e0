"""Where a warm re-check's seconds go: each command of a check sent to real, fully warmed-up worker processes, with
the time the caller waited, the time the worker spent, and how many modules the command imported; then whole checks.

A check first fills the build cache, so the commands load the extension as a re-check does.
Usage (on the GPU machine, from the repo root):
    python benchmarks/recheck_steps.py [--cache DIR] [--settle SECONDS] [--slow N]
--slow N: the NxN matmul problem of benchmarks/fixtures.py (a forward of milliseconds) against eager and torch.compile.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import fixtures  # noqa: E402
from dice_lsp import harness  # noqa: E402
from dice_lsp.harness import handover, messages  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cache", help="build cache (one holding the precompiled header saves its build)")
    parser.add_argument("--settle", type=float, default=15.0, help="seconds the spares get to warm up")
    parser.add_argument("--slow", type=int, default=0, help="NxN matmul problem instead of the 512x512 add")
    args = parser.parse_args()
    pool = harness.WorkerPool()
    options = harness.Options(cache_dir=args.cache or tempfile.mkdtemp(prefix="dice-steps-"),
                              baseline="both" if args.slow else "eager")
    reference_text, solution_text = fixtures.matmul(args.slow) if args.slow else fixtures.add()
    started = time.perf_counter()
    report = harness.check(reference_text, solution_text, options, pool=pool)
    print(f"filling the cache: {time.perf_counter() - started:.1f} s, {report.summary()}")

    pool.keep_warm(2)
    pool.fill(options)  # a spare of each role
    time.sleep(args.settle)
    reference, solution = pool.start(options, role="reference"), pool.start(options, role="solution")
    exchange = reference.directory  # as a check does: the reference's own folder
    cached = options.with_(cache_dir=options.extensions_dir)
    commands = [
        (solution, messages.Build(path=solution.file("solution.py", solution_text), options=cached)),
        (reference, messages.MakeReference(path=reference.file("reference.py", reference_text), options=cached,
                                           exchange=exchange)),
        (solution, messages.RunSolution(reference=solution.file("inputs.py", handover.input_recipe(reference_text)),
                                        outputs=solution.inner_scratch, share=True)),
        (reference, messages.Compare(exchange=exchange)),
        (reference, messages.Time(trials=options.timing_trials, warmup=options.warmup_trials)),
        (solution, messages.Time(trials=options.timing_trials, warmup=options.warmup_trials)),
        *([(reference, messages.Time(trials=options.timing_trials, warmup=options.warmup_trials, compiled=True)),
           (reference, messages.Time(trials=options.timing_trials, warmup=options.warmup_trials, compiled=True,
                                     round=1))]
          if args.slow else []),  # the first compiles
        (solution, messages.Inspect(kernels=("add_kernel",))),
    ]
    print(f"{'command':14s} {'waited':>8s} {'in worker':>10s} {'imported':>9s}  warm-up")
    for worker, command in commands:
        started = time.perf_counter()
        answer = worker.call(command, 120)
        if isinstance(command, messages.RunSolution):
            handover.take_outputs(solution, exchange, options)
            handover.hand_shared(solution, reference)
        waited = time.perf_counter() - started
        cost = answer.cost
        note = f"  failed: {answer.error}" if isinstance(answer, messages.Failed) else ""
        compiled = isinstance(command, messages.Time) and command.compiled
        label = f"{command.tag} (compile)" if compiled else command.tag
        print(f"{label:14s} {waited:8.3f} {cost.seconds:10.3f} {cost.imported:9d}  "
              f"{cost.warm_up_seconds:.1f} s {cost.warm_up_error}{note}")
    reference.close()
    solution.close()
    for i in range(3):
        time.sleep(args.settle)
        started = time.perf_counter()
        report = harness.check(reference_text, solution_text, options, pool=pool)
        stages = ", ".join(f"{s.name} {s.seconds:.2f}" for s in report.stages)
        print(f"whole check #{i + 1} after {args.settle:.0f} s: {time.perf_counter() - started:.2f} s ({stages})")
    pool.close()


if __name__ == "__main__":
    main()
