"""Does decoding write valid code on problems the model never saw? The share of samples whose code block parses
(`ast.parse`), and of those that also define ModelNew and call load_inline, per decoding variant, greedy and sampled.

The problems are benchmarks/decode_validity/*.py: our own files in the styles real modules are written in (docstrings,
Args: blocks, module-level size constants, get_init_inputs with arguments), never KernelBench's. CPU is enough: the
bundled model runs there (one torch thread, which is faster than two on a shared 2-core machine).

    python3 benchmarks/decode_validity.py                       # every variant, greedy and sampled
    python3 benchmarks/decode_validity.py --variants baseline --modes greedy --record
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import platform
import socket
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dice_lsp.engine.checkpoint import BUNDLED, load  # noqa: E402
from dice_lsp.engine.drafts import generate_kernel  # noqa: E402
from dice_lsp.engine.settings import DecodeSettings  # noqa: E402

PROBLEMS = Path(__file__).resolve().parent / "decode_validity"
# Greedy is DICE's evaluation setting (static, top-k 1); sampled is its RL rollouts' (dynamic 0.9, temperature 1).
MODES = {
    "greedy": (DecodeSettings(), 1),
    "sampled": (DecodeSettings(strategy="dynamic", threshold=0.9, top_k=0, temperature=1.0), 1),
}
# Each variant: the DecodeSettings fields it sets. baseline is SDAR's decoding of the built-in prompt as it was.
VARIANTS: dict[str, dict] = {
    "baseline": {"given_prefix": False, "confidence": "sampled"},
    "given-prefix": {"given_prefix": True, "confidence": "sampled"},
    "model-confidence": {"given_prefix": False, "confidence": "model"},
    "both": {"given_prefix": True, "confidence": "model"},
}


def verdict(code: str | None) -> tuple[bool, bool]:
    """(parses, parses and defines ModelNew and calls load_inline) for a sample's code block."""
    if code is None:
        return False, False
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return False, False
    model_new = any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)
    load_inline = any(isinstance(n, ast.Call) and _name(n.func) == "load_inline" for n in ast.walk(tree))
    return True, model_new and load_inline


def _name(func: ast.expr) -> str:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def first_error(code: str | None) -> str:
    if code is None:
        return "no code block"
    try:
        ast.parse(code)
    except SyntaxError as error:
        return f"line {error.lineno}: {error.msg}"
    return ""


def run(loaded, variant: str, mode: str, max_new_tokens: int, log: Path) -> dict:
    """Decode every problem (samples already in `log` for these settings are read back, not decoded again) and
    count the verdicts."""
    base, samples = MODES[mode]
    # stop_token_ids None: the checkpoint's (DecodeSettings' own default, (), would never stop)
    settings = replace(base, **VARIANTS[variant], max_new_tokens=max_new_tokens, stop_token_ids=None)
    key = {"variant": variant, "mode": mode, "max_new_tokens": max_new_tokens}
    done = {}
    if log.is_file():
        for line in log.read_text().splitlines():
            record = json.loads(line)
            # A sample that stopped by itself within this budget decodes the same under it (a seeded generator
            # draws per pass): one cut off under a smaller budget does not.
            same = record["variant"] == variant and record["mode"] == mode
            if same and (record["max_new_tokens"] == max_new_tokens
                         or (record["stop"] == "stop" and record["tokens"] <= max_new_tokens)):
                done.setdefault(record["problem"], []).append(record)
    counts = {"samples": 0, "parses": 0, "complete": 0, "cut": 0, "tokens": 0, "seconds": 0.0}
    for problem in sorted(PROBLEMS.glob("*.py")):
        records = done.get(problem.stem, [])[:samples]
        if len(records) < samples:
            records = decode(loaded, problem, settings, samples, key)
            with log.open("a") as out:
                out.writelines(json.dumps(r) + "\n" for r in records)
        for r in records:
            counts["samples"] += 1
            counts["parses"] += r["parses"]
            counts["complete"] += r["complete"]
            counts["cut"] += r["stop"] == "length"
            counts["tokens"] += r["tokens"]
            counts["seconds"] += r["seconds"]
    return counts


def decode(loaded, problem: Path, settings: DecodeSettings, samples: int, key: dict) -> list[dict]:
    began = time.perf_counter()
    drafts = generate_kernel(problem.read_text(), loaded, settings, samples=samples, seed=0)
    seconds = (time.perf_counter() - began) / samples
    out = []
    for index, d in enumerate(drafts):
        parses, complete = verdict(d.code)
        out.append(dict(key, problem=problem.stem, sample=index, parses=parses, complete=complete,
                        error=first_error(d.code), stop=d.generation.stop_reason,
                        tokens=len(d.generation.token_ids), seconds=seconds, text=d.generation.text))
    return out


def table(rows: list[tuple[str, str, dict]]) -> str:
    lines = ["| variant | mode | samples | parses | defines ModelNew + load_inline | cut off | mean tokens |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for variant, mode, c in rows:
        n = c["samples"]
        lines.append(f"| {variant} | {mode} | {n} | {c['parses']}/{n} ({c['parses'] / n:.0%}) | "
                     f"{c['complete']}/{n} ({c['complete'] / n:.0%}) | {c['cut']} | {c['tokens'] / n:.0f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(BUNDLED))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--max-new-tokens", type=int, default=2048)
    parser.add_argument("--log", type=Path, default=Path("/tmp/decode_validity.jsonl"),
                        help="every sample's text and verdict, one JSON line each: appended, and read back by a "
                             "later run, which decodes only what is missing")
    parser.add_argument("--record", action="store_true", help="append the table to benchmarks/RESULTS.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    loaded = load(args.model, device="cpu")
    rows = []
    for variant in args.variants:
        for mode in args.modes:
            rows.append((variant, mode, run(loaded, variant, mode, args.max_new_tokens, args.log)))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    text = table(rows)
    print(text)
    if args.record:
        stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        problems = len(list(PROBLEMS.glob("*.py")))
        model = Path(args.model).resolve()
        shown = model.relative_to(ROOT) if model.is_relative_to(ROOT) else args.model
        heading = (f"\n## decode validity, {stamp}, {socket.gethostname()} ({platform.machine()}, CPU, 1 torch thread)"
                   f"\n\nbenchmarks/decode_validity.py: {shown}, {problems} problems of benchmarks/decode_validity/, "
                   f"at most {args.max_new_tokens} new tokens; one greedy and one sampled (seed 0) sample per "
                   "problem.\n\n")
        with (ROOT / "benchmarks" / "RESULTS.md").open("a") as results:
            results.write(heading + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
