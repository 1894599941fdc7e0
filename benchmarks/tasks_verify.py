"""GPU verification of the task generator (issue 9): every template, a few instances each, checked by the harness
(build, 5 correctness trials, deception checks, eager timing); prints a table per template and appends a dated
section with the machine's name to benchmarks/RESULTS.md.

    python benchmarks/tasks_verify.py --per-template 3 [--families norm softmax] [--tol 1e-4] [--seed 0]
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from dice_lsp import harness  # noqa: E402


def clean(report) -> bool:
    """Correct with no run-time warning. A solution that picks its kernel by shape (one block per row when the
    reduced dim is the last) leaves the other kernel unlaunched on these inputs: that note is not a failure, but an
    own kernel that never ran while none other did is (an error-severity finding)."""
    return report.correct and not any(f.severity == "error" or (f.severity == "warning"
                                                                 and f.code != "kernel-not-launched")
                                      for f in report.findings)


def instances(family: str, name: str, args, render) -> list:
    """--per-template instances of one template from seeds --seed, --seed + 1, ..., those of --shape-class only."""
    if not args.shape_class:
        return [render(family, name, args.seed + i) for i in range(args.per_template)]
    found = []
    for seed in range(args.seed, args.seed + 200):
        task = render(family, name, seed)
        if args.shape_class in task.shape_class:
            found.append(task)
            if len(found) == args.per_template:
                break
    return found


def main() -> int:
    from build import machine
    from dice_lsp.train.tasks import FAMILIES, render, templates

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-template", type=int, default=3, help="instances of each template (seeds 0..N-1)")
    parser.add_argument("--seed", type=int, default=0, help="first instance seed")
    parser.add_argument("--families", nargs="*", default=list(FAMILIES))
    parser.add_argument("--templates", nargs="*", metavar="FAMILY/TEMPLATE",
                        help="only these templates (default: every template of --families)")
    parser.add_argument("--shape-class", metavar="TEXT",
                        help="only instances whose shape class contains TEXT (e.g. last: seeds are searched from "
                             "--seed until --per-template instances match, at most 200 per template)")
    parser.add_argument("--tol", type=float, default=1e-2, help="atol = rtol (1e-2 as KernelBench v0.1; 1e-4 strict)")
    parser.add_argument("--workers", type=int, default=None, help="parallel builds (default: all cores)")
    parser.add_argument("--results", default=str(ROOT / "benchmarks" / "RESULTS.md"))
    parser.add_argument("--json", metavar="PATH", help="also write each template's median speedup (null when none "
                        "was correct) as JSON, for `dice-lsp data tasks --favor-fast`; an existing file keeps "
                        "the other templates' entries")
    args = parser.parse_args()

    chosen = [(family, name) for family in args.families for name in templates(family)
              if not args.templates or f"{family}/{name}" in args.templates]
    if not chosen:
        parser.error(f"no template matches {' '.join(args.templates or [])}; write family/template")
    tasks = [task for family, name in chosen for task in instances(family, name, args, render)]
    options = harness.Options(atol=args.tol, rtol=args.tol, baseline="eager", timing_trials=50, warmup_trials=5)
    started = time.perf_counter()
    reports = harness.check_many([(t.reference, t.solution) for t in tasks], options, args.workers)
    seconds = time.perf_counter() - started

    rows, failures, medians = [], [], {}
    for family, name in chosen:
        pairs = [(t, r) for t, r in zip(tasks, reports) if t.family == family and t.template == name]
        correct = [r for _, r in pairs if clean(r)]
        speedups = [r.speedup_eager for r in correct if r.speedup_eager]
        medians[f"{family}/{name}"] = round(statistics.median(speedups), 3) if speedups else None
        median = f"{statistics.median(speedups):.2f}" if speedups else "-"
        rows.append(f"| {family} | {name} | {len(correct)}/{len(pairs)} | {median} |")
        failures += [f"{t.family}/{t.template} ({t.shape_class}): {r.summary()}" for t, r in pairs
                     if r not in correct]
    total = sum(1 for r in reports if clean(r))
    table = ["| family | template | correct | median speedup (eager) |", "| --- | --- | --- | --- |"] + rows
    print("\n".join(table))
    print(f"{total} of {len(tasks)} correct with no run-time warning (atol = rtol = {args.tol}) in {seconds:.0f} s")
    for line in failures:
        print("FAILED", line)

    if args.json:
        target = Path(args.json)
        # a run over some templates updates their entries in an existing file and keeps the others
        known = json.loads(target.read_text(encoding="utf-8")) if target.exists() else {}
        target.write_text(json.dumps({**known, **medians}, indent=2) + "\n", encoding="utf-8")
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    section = [f"\n## task generator verification, {stamp}, {machine()}\n",
               f"`python benchmarks/tasks_verify.py {' '.join(sys.argv[1:])}`: "
               f"{total} of {len(tasks)} instances correct with no run-time warning, {seconds:.0f} s in all.\n",
               *table]
    if failures:
        section += ["", "Failures:", ""] + [f"- {line}" for line in failures]
    with open(args.results, "a", encoding="utf-8") as out:
        out.write("\n".join(section) + "\n")
    return 0 if total == len(tasks) else 1


if __name__ == "__main__":
    sys.exit(main())
