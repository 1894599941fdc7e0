"""What the sandbox adds to a worker's start: a worker started with `sandbox="off"` against one started in
bubblewrap, each until it answers its first command (torch imported, no CUDA context: `warm=False`), alternating,
`--runs` of each. Prints the medians and their difference; the goal is at most 50 ms more with the sandbox. A root
caller's workers also drop to an unprivileged user (the namespace mapped from outside, a seccomp filter): run as
root, a third kind, "bubblewrap-as-root" (`unprivileged=False`), shows what that costs.

    python benchmarks/sandbox_start.py [--runs 10] [--device cpu|auto]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

from dice_lsp.harness import Options, messages, process, sandbox


def start_once(options: Options) -> tuple[float, float]:
    """(seconds until bwrap's sandbox exists and the worker process is running, seconds until it answered)."""
    started = time.perf_counter()
    worker = process.Worker(options, warm=False)
    running = time.perf_counter() - started
    try:
        answer = worker.call(messages.Prepare(cache_dir="/nonexistent/for-a-quick-failure"), 120)
        assert isinstance(answer, (messages.Failed, messages.Prepared))
        return running, time.perf_counter() - started
    finally:
        worker.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    found = sandbox.status()
    if not found.available:
        raise SystemExit(f"no sandbox here: {found.reason}")
    kinds = {"off": Options(device=args.device, sandbox="off"),
             "bubblewrap": Options(device=args.device, sandbox="require")}
    if found.user:
        kinds["bubblewrap-as-root"] = Options(device=args.device, sandbox="require", unprivileged=False)
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    start_once(kinds["off"])  # the first start pays the page cache's warm-up for both
    for _ in range(args.runs):
        for name, options in kinds.items():
            times[name].append(start_once(options))
    medians = {name: (statistics.median(r for r, _ in rows), statistics.median(a for _, a in rows))
               for name, rows in times.items()}
    result = {"machine": platform.node(), "cores": os.cpu_count(), "runs": args.runs,
              "median_running_s": {k: round(v[0], 4) for k, v in medians.items()},
              "median_answered_s": {k: round(v[1], 4) for k, v in medians.items()},
              "unprivileged_user": found.user,
              "added_ms": {k: round((v[1] - medians["off"][1]) * 1000, 1) for k, v in medians.items() if k != "off"},
              "ratio": {k: round(v[1] / medians["off"][1], 3) for k, v in medians.items() if k != "off"}}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
