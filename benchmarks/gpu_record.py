"""A GPU test run's record from its outcomes.jsonl (tests/fixtures/outcome_log.py): passed, failed, skipped and
unfinished tests and seconds per file, the slowest tests; printed, and appended as a dated section to RESULTS.md.

    python benchmarks/gpu_record.py OUT/outcomes.jsonl --set call1 --card "NVIDIA H100 80GB HBM3" --commit 023c6bf \\
        --setup-s 31 --exit 1 --results OUT/RESULTS.md

A test with a start line and no end was running when the run was cut (a hang, or the call's time): "not finished".
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

KINDS = ("passed", "failed", "error", "skipped", "not finished")


def read(path: Path) -> tuple[dict[str, dict], list[str]]:
    """Each test's last state ({file, outcome, seconds}) in the order they started, and the run's notes."""
    tests: dict[str, dict] = {}
    notes = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:  # a line cut by a kill
            continue
        if entry.get("event") == "start":
            tests[entry["test"]] = {"file": entry["file"], "outcome": "not finished", "seconds": 0.0,
                                    "started": entry["at"]}
        elif entry.get("event") == "end":
            tests.setdefault(entry["test"], {"file": entry["file"], "started": entry["at"]})
            tests[entry["test"]].update(outcome=entry["outcome"], seconds=entry["seconds"])
        elif entry.get("event") == "note":
            notes.append(entry["note"])
    return tests, notes


def per_file(tests: dict[str, dict]) -> dict[str, dict]:
    """Counts by outcome and seconds by file."""
    files: dict[str, dict] = defaultdict(lambda: {**{kind: 0 for kind in KINDS}, "seconds": 0.0})
    for test in tests.values():
        row = files[test["file"]]
        row[test["outcome"]] += 1
        row["seconds"] += test["seconds"]
    return dict(files)


def render(tests: dict[str, dict], notes: list[str], args: argparse.Namespace, cut_at: float) -> str:
    for test in tests.values():  # an unfinished test ran from its start to the cut
        if test["outcome"] == "not finished":
            test["seconds"] = max(0.0, cut_at - test["started"])
    files = per_file(tests)
    totals = {kind: sum(row[kind] for row in files.values()) for kind in KINDS}
    said = ", ".join(f"{totals[kind]} {kind if kind != 'error' else 'errors'}" for kind in KINDS
                     if totals[kind] or kind in ("passed", "failed"))
    lines = [f"`bash benchmarks/gpu_session.sh {args.set}` (one pytest; set-up {args.setup_s:.0f} s, pytest exit "
             f"{args.exit}): **{said}** in {sum(r['seconds'] for r in files.values()):.0f} s of tests.", "",
             "| file | passed | failed | errors | skipped | not finished | seconds |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, row in files.items():
        lines.append(f"| {name} | " + " | ".join(str(row[kind]) for kind in KINDS) + f" | {row['seconds']:.0f} |")
    bad = [(name, test["outcome"]) for name, test in tests.items() if test["outcome"] in ("failed", "error",
                                                                                         "not finished")]
    if bad:
        lines += ["", "Not passed (reasons in failures.log of the run):"]
        lines += [f"- `{name}`: {outcome}" for name, outcome in bad]
    slowest = [item for item in sorted(tests.items(), key=lambda item: -item[1]["seconds"])[:8]
               if item[1]["seconds"] >= 1]
    if slowest:
        lines += ["", "Slowest: " + ", ".join(f"`{name.split('/')[-1]}` {test['seconds']:.0f} s"
                                                for name, test in slowest) + "."]
    if notes:
        lines += ["", "Notes: " + "; ".join(notes) + "."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("outcomes", type=Path)
    parser.add_argument("--set", default="all", help="which tests ran: call1, call2, smoke, all, or paths")
    parser.add_argument("--card", default="no GPU")
    parser.add_argument("--commit", default="")
    parser.add_argument("--setup-s", type=float, default=0.0)
    parser.add_argument("--exit", default="?", help="pytest's exit status (124: cut at the call's time)")
    parser.add_argument("--ended", type=float, default=0.0, help="when pytest ended (epoch s; default: now)")
    parser.add_argument("--results", default="", help="append the section to this file")
    args = parser.parse_args()
    tests, notes = read(args.outcomes)
    body = render(tests, notes, args, args.ended or time.time())
    when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    title = (f"## GPU tests, {args.set}, {when}, {args.card} ({os.cpu_count()} cores)"
             f"{', commit ' + args.commit if args.commit else ''}")
    print(f"{title}\n\n{body}")
    if args.results:
        with open(args.results, "a") as out:
            out.write(f"\n{title}\n\n{body}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
