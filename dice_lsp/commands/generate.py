"""`dice-lsp generate FILE`: write a CUDA solution for a KernelBench problem with a DICE model, or (with --infill)
fill in the CUDA source of a solution skeleton, keeping the rest of the file byte for byte.

A sample that reaches --max-new-tokens before the model ends it is cut off: it is neither written nor printed as a
solution, and the exit status is 1 when no sample is whole. Several samples need sampling: with greedy decoding
(--top-k 1 or --temperature 0) they would all be the same text, so the command refuses and says which flag to change.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dice_lsp.anatomy import core_split, find_reference, parse
from dice_lsp.commands.arguments import device, positive
from dice_lsp.commands.decoding import add_decoding_options, decoding_from, refuse_identical_samples
from dice_lsp.commands.errors import CommandError
from dice_lsp.commands.progress import ProgressLine, add_progress_option
from dice_lsp.commands.terminal import shown
from dice_lsp.engine.errors import EngineError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "generate", help="write a CUDA kernel solution with a DICE model",
        epilog="exit status 0: at least one whole kernel; 1: none (no code, or cut off by --max-new-tokens); "
               "2: bad arguments or files")
    parser.add_argument("file", type=Path, help="a KernelBench problem (class Model); with --infill, a solution")
    parser.add_argument("--infill", action="store_true",
                        help="FILE is a solution skeleton: rewrite only its CUDA source string (DICE's core)")
    parser.add_argument("--reference", type=Path, help="with --infill: the problem file, if FILE does not link it")
    parser.add_argument("--samples", type=positive, default=1,
                        help="candidates to decode in one batch (default 1; more than one needs sampling: --top-k 0)")
    parser.add_argument("--model", default="", help="checkpoint directory or hub id in the local HF cache")
    parser.add_argument("--device", type=device, default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32"],
                        help="the model's weights: auto is the checkpoint's dtype on GPU, float32 on CPU")
    parser.add_argument("--out", type=Path, help="write the solution here (NAME_2.py, ... for more samples)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per sample instead of code")
    add_progress_option(parser)
    group = parser.add_argument_group("decoding")
    add_decoding_options(group)
    group.add_argument("--seed", type=int, help="makes sampling repeatable")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    text = _read(args.file)
    skeleton, reference = (text, _reference_for(args, text)) if args.infill else (None, text)
    _check_inputs(args, skeleton, reference)  # before the model loads: seconds on a GPU, wasted on a wrong file
    decoding = decoding_from(args)
    refuse_identical_samples(args.samples, decoding)
    progress = ProgressLine(args.progress)
    try:
        drafts = _decode(args, decoding, skeleton, reference, progress)
    finally:
        progress.close()
    return _write(args, drafts)


def _check_inputs(args: argparse.Namespace, skeleton: str | None, reference: str) -> None:
    """The problem defines Model, and an infill skeleton has a core to fill in, by the anatomy's rules."""
    where = args.file if not args.infill else args.reference or f"the problem {args.file} links"
    if not parse(reference).is_reference:
        raise CommandError(f"{where} defines no `class Model`: generate writes a solution for a KernelBench problem "
                           "(class Model, get_inputs, get_init_inputs)"
                           + ("" if args.infill else "; to fill in a solution skeleton, pass --infill"))
    if skeleton is not None and core_split(parse(skeleton)) is None:
        raise CommandError(f"{args.file} has no CUDA source string to fill in: --infill rewrites the string assigned "
                           "to a variable and passed to load_inline(cuda_sources=...)")


def _decode(args: argparse.Namespace, decoding, skeleton: str | None, reference: str, progress: ProgressLine) -> list:
    progress.stage("loading torch and the model")
    # These load torch (over a second): only when a kernel is written, never for `dice-lsp --help`.
    from dice_lsp.engine import generate_kernel, load
    from dice_lsp.engine.checkpoint import choose

    def on_block(event) -> None:
        tokens = max(event.tokens, default=0)
        rate = sum(event.tokens) / event.seconds if event.seconds > 0 else 0.0
        progress.note(f"block {event.blocks}, {tokens} tokens, {event.finished}/{args.samples} samples done, "
                      f"{rate:.0f} tokens/s")

    try:
        model_ref = choose(args.model)
        progress.stage(f"loading {model_ref}")
        loaded = load(model_ref, device=args.device, dtype=args.dtype)
        progress.stage(f"decoding {args.samples} sample{'s' if args.samples > 1 else ''} on {loaded.device}")
        return generate_kernel(reference, loaded, decoding, samples=args.samples, infill_skeleton=skeleton,
                               seed=args.seed, on_block=on_block)
    except EngineError as error:
        raise CommandError(str(error)) from None


def _write(args: argparse.Namespace, drafts: list) -> int:
    """Each whole sample to --out (or stdout), each failed one explained on stderr; 1 when none is whole."""
    whole = 0
    for i, draft in enumerate(drafts, 1):
        g = draft.generation
        code, note = draft.code, draft.note
        if g.stop_reason == "length":  # the model had not finished: whatever code it holds is cut short
            cut = (f"cut off at --max-new-tokens {args.max_new_tokens} before the model finished "
                   f"({len(g.token_ids)} tokens)")
            note = f"{cut}; not written: raise --max-new-tokens" if code is not None else f"{note}; {cut}"
            code = None
        path = None
        if code is not None:
            whole += 1
            if args.out is not None:
                path = args.out if i == 1 else args.out.with_name(f"{args.out.stem}_{i}{args.out.suffix}")
                _save(path, code)
        if args.json:
            print(json.dumps({
                "sample": i, "code": code, "note": note, "stop_reason": g.stop_reason, "tokens": len(g.token_ids),
                "prompt_tokens": g.prompt_tokens, "seconds": round(g.seconds, 3),
                "tokens_per_second": round(g.tokens_per_second, 1), "text": g.text,
                "path": str(path) if path is not None else None,
            }))
            continue
        if code is None:
            print(shown(f"dice-lsp generate: sample {i}: {note}"), file=sys.stderr)
        elif path is not None:
            print(shown(f"wrote {path}"), file=sys.stderr)
        else:
            if len(drafts) > 1:
                print(f"# ---- sample {i} of {len(drafts)} ----")
            # The model's text: kept byte for byte for a pipe or a file (`> solution.py`); a terminal gets it escaped
            print(shown(code, lines=True) if sys.stdout.isatty() else code, end="")
    return 0 if whole else 1


def _save(path: Path, code: str) -> None:
    try:
        path.write_text(code, encoding="utf-8")
    except OSError as error:
        raise CommandError(f"cannot write {path}: {error.strerror or error}") from None


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
