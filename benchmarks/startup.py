"""Start-up from a new process, as a user meets it: the first block of `generate` and a `check` of a solution that is
already built. Goals (issue 24, on the H200): first token under 5 s and a cached check under 5 s.

generate: a new interpreter does what `dice-lsp generate` does (import the engine, load the model, decode) and says
when each part ended; the first block's end is the first token a user could see (blocks commit together). The
parent's wall clock from the spawn holds it all, the interpreter's own start included.

check: `dice-lsp check --json` in a new process on a solution whose build is cached (one run first builds it); its
wall time and the report's stages (where the seconds went).

    python benchmarks/startup.py [--runs 3] [--device auto|cpu] [--model DIR] [--what generate,check]
        [--reference FILE --solution FILE]

Defaults: the bundled model on examples/row_soft_threshold.py; on a GPU the harness tests' CUDA add, on the CPU the
example's C++ solution. Prints one JSON object (medians and every run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

DRIVER = r"""
import json, sys, time
began = time.perf_counter()
marks = {}
from dice_lsp.engine import generate_kernel, load
from dice_lsp.engine.checkpoint import choose
marks["imported_s"] = time.perf_counter() - began
loaded = load(choose(sys.argv[2] or None), device=sys.argv[3])
marks["loaded_s"] = time.perf_counter() - began
def on_block(event):
    if "first_block_s" not in marks:
        marks["first_block_s"] = time.perf_counter() - began
        print("FIRST", flush=True)
drafts = generate_kernel(open(sys.argv[1]).read(), loaded, samples=1, seed=0, on_block=on_block)
marks["done_s"] = time.perf_counter() - began
marks["tokens"] = len(drafts[0].generation.token_ids)
marks["decode_s"] = drafts[0].generation.seconds
marks["device"] = str(loaded.device)
print("MARKS " + json.dumps(marks), flush=True)
"""


def generate_once(problem: Path, model: str, device: str) -> dict:
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", DRIVER, str(problem), model, device], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=ROOT)
    first = None
    marks: dict = {}
    for line in child.stdout:
        if line.startswith("FIRST") and first is None:
            first = time.perf_counter() - started
        elif line.startswith("MARKS "):
            marks = json.loads(line[6:])
    error = child.stderr.read()
    if child.wait() != 0:
        raise SystemExit(f"generate failed: {error[-2000:]}")
    return {"first_token_s": round(first, 3) if first is not None else None,
            "total_s": round(time.perf_counter() - started, 3), **marks}


def check_once(reference: Path, solution: Path, device: str) -> dict:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "dice_lsp", "check", "--json", "--device", device, str(reference),
                           str(solution)], capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - started
    if not done.stdout.strip():
        raise SystemExit(f"check printed no report: {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    return {"wall_s": round(seconds, 3), "status": report["status"], "cached": report.get("build_cached"),
            "stages": {s["name"]: round(s["seconds"], 3) for s in report["stages"]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--model", default="", help="a checkpoint directory (default: the bundled model)")
    parser.add_argument("--what", default="generate,check")
    parser.add_argument("--problem", default=str(ROOT / "examples" / "row_soft_threshold.py"))
    parser.add_argument("--reference", default="")
    parser.add_argument("--solution", default="")
    args = parser.parse_args()
    import torch  # only to choose the default check files

    gpu = args.device != "cpu" and torch.cuda.is_available()
    files = ROOT / "tests" / "harness" / "files"
    reference = Path(args.reference or (files / "add_reference.py" if gpu else ROOT / "examples" /
                                        "row_soft_threshold.py"))
    solution = Path(args.solution or (files / "cuda_solution.py" if gpu else ROOT / "examples" /
                                      "row_soft_threshold_cpp.py"))
    result: dict = {"machine": platform.node(), "cores": os.cpu_count(), "device": args.device,
                    "gpu": torch.cuda.get_device_name(0) if gpu else None, "runs": args.runs}
    wanted = set(args.what.split(","))
    if "generate" in wanted:
        runs = [generate_once(Path(args.problem), args.model, args.device) for _ in range(args.runs)]
        result["generate"] = {"median_first_token_s": statistics.median(r["first_token_s"] or r["total_s"]
                                                                          for r in runs),
                              "median_total_s": statistics.median(r["total_s"] for r in runs), "each": runs}
    if "check" in wanted:
        first = check_once(reference, solution, args.device)  # builds it, if no earlier run did
        runs = [check_once(reference, solution, args.device) for _ in range(args.runs)]
        result["check"] = {"first": first, "median_cached_s": statistics.median(r["wall_s"] for r in runs),
                           "each": runs}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
