"""`dice-lsp generate FILE`: write a CUDA solution for a KernelBench problem with a DICE model, or (with --infill)
fill in the CUDA source of a solution skeleton, keeping the rest of the file byte for byte."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dice_lsp.anatomy import find_reference, parse
from dice_lsp.commands.decoding import add_decoding_options, decoding_from
from dice_lsp.commands.errors import CommandError
from dice_lsp.engine.errors import EngineError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("generate", help="write a CUDA kernel solution with a DICE model")
    parser.add_argument("file", type=Path, help="a KernelBench problem (class Model); with --infill, a solution")
    parser.add_argument("--infill", action="store_true",
                        help="FILE is a solution skeleton: rewrite only its CUDA source string (DICE's core)")
    parser.add_argument("--reference", type=Path, help="with --infill: the problem file, if FILE does not link it")
    parser.add_argument("--samples", type=int, default=1, help="candidates to decode in one batch (default 1)")
    parser.add_argument("--model", default="", help="checkpoint directory or hub id in the local HF cache")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32"])
    parser.add_argument("--out", type=Path, help="write the solution here (NAME_2.py, ... for more samples)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per sample instead of code")
    group = parser.add_argument_group("decoding")
    add_decoding_options(group)
    group.add_argument("--seed", type=int, help="makes sampling repeatable")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # These load torch (over a second): only when a kernel is written, never for `dice-lsp --help`.
    from dice_lsp.engine import generate_kernel, load
    from dice_lsp.engine.checkpoint import choose

    text = _read(args.file)
    skeleton, reference = (text, _reference_for(args, text)) if args.infill else (None, text)
    if args.samples < 1:
        raise CommandError("--samples must be at least 1")
    try:
        model_ref = choose(args.model)
    except EngineError as error:
        raise CommandError(str(error)) from None
    decoding = decoding_from(args)
    try:
        loaded = load(model_ref, device=args.device, dtype=args.dtype)
        drafts = generate_kernel(reference, loaded, decoding, samples=args.samples, infill_skeleton=skeleton,
                                 seed=args.seed)
    except EngineError as error:
        raise CommandError(str(error)) from None

    written = []
    for i, draft in enumerate(drafts, 1):
        if args.out is not None and draft.code is not None:
            path = args.out if i == 1 else args.out.with_name(f"{args.out.stem}_{i}{args.out.suffix}")
            path.write_text(draft.code, encoding="utf-8")
            written.append(path)
        g = draft.generation
        if args.json:
            print(json.dumps({
                "sample": i, "code": draft.code, "note": draft.note, "stop_reason": g.stop_reason,
                "tokens": len(g.token_ids), "prompt_tokens": g.prompt_tokens, "seconds": round(g.seconds, 3),
                "tokens_per_second": round(g.tokens_per_second, 1), "text": g.text, "path": str(path) if
                args.out is not None and draft.code is not None else None,
            }))
        elif args.out is None and draft.code is not None:
            if len(drafts) > 1:
                print(f"# ---- sample {i} of {len(drafts)} ----")
            print(draft.code, end="")
        if draft.code is None and not args.json:
            print(f"dice-lsp generate: sample {i}: {draft.note}", file=sys.stderr)
    if written and not args.json:
        for path in written:
            print(f"wrote {path}", file=sys.stderr)
    return 0 if any(d.code is not None for d in drafts) else 1


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise CommandError(f"cannot read {path}: {error}") from None


def _reference_for(args: argparse.Namespace, skeleton: str) -> str:
    """The problem that an infill skeleton solves: --reference, the file's `# dice: reference = path`, or the
    skeleton itself when it also defines class Model."""
    if args.reference is not None:
        return _read(args.reference)
    anatomy = parse(skeleton)
    pairing = find_reference(anatomy, args.file)
    if pairing.text is not None:
        return pairing.text
    if anatomy.reference_link:
        raise CommandError(f"{args.file} links its reference as {anatomy.reference_link}: {pairing.problem}")
    raise CommandError(f"--infill needs the problem: pass --reference PROBLEM.py or add "
                       f"`# dice: reference = PROBLEM.py` to {args.file}")
