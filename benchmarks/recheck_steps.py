"""Where a warm re-check's seconds go inside the workers: each stage command run in one process, timed, and the
slowest ones under cProfile. A check first fills the build cache, so the steps load the extension as a re-check does.

Usage (on the GPU machine, from the repo root): python benchmarks/recheck_steps.py [--profile N]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
FILES = ROOT / "tests" / "harness" / "files"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--profile", type=int, default=12, help="cProfile rows shown for each step over 0.5 s")
    parser.add_argument("--cache", help="build cache (one holding the precompiled header saves its build)")
    args = parser.parse_args()
    import harness

    cache = args.cache or tempfile.mkdtemp(prefix="dice-steps-")
    options = harness.Options(cache_dir=cache, baseline="eager")
    reference_text, solution_text = (FILES / "add_reference.py").read_text(), (FILES / "cuda_solution.py").read_text()
    started = time.perf_counter()
    report = harness.check(reference_text, solution_text, options)
    print(f"filling the cache: {time.perf_counter() - started:.1f} s, {report.summary()}")

    from harness import stages
    from harness.worker import Side, warm_up_cuda

    work = Path(tempfile.mkdtemp(prefix="dice-steps-work-"))
    (work / "reference.py").write_text(reference_text)
    (work / "solution.py").write_text(solution_text)
    payload = options.with_(cache_dir=options.extensions_dir).to_dict()
    reference, solution = Side(), Side()
    steps = [
        ("CUDA context", lambda: warm_up_cuda("auto")),
        ("build (cached)", lambda: stages.build(solution, {"path": str(work / "solution.py"), "options": payload})),
        ("reference", lambda: stages.reference(reference, {"path": str(work / "reference.py"), "options": payload,
                                                           "exchange": str(work)})),
        ("run (solution)", lambda: stages.run(solution, {"exchange": str(work)})),
        ("compare", lambda: stages.compare(reference, {"exchange": str(work)})),
        ("time eager", lambda: stages.time(reference, {})),
        ("time solution", lambda: stages.time(solution, {})),
        ("inspect, first", lambda: stages.inspect(solution, {"kernels": ["add_kernel"]})),
        ("inspect, again", lambda: stages.inspect(solution, {"kernels": ["add_kernel"]})),
    ]
    for name, step in steps:
        profiler = cProfile.Profile()
        started = time.perf_counter()
        profiler.enable()
        step()
        profiler.disable()
        seconds = time.perf_counter() - started
        print(f"{name:16s} {seconds:7.3f} s")
        if seconds > 0.5 and args.profile:
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(args.profile)
            print("\n".join("    " + line for line in text.getvalue().splitlines()[6:] if line.strip()))


if __name__ == "__main__":
    main()
