"""`dice-lsp data curate IN OUT --min-speedup 2.0`: keep the training pairs that build, are correct, are not
deceptive and are fast enough, checked by the harness in batch mode; prints counts and reasons.
`dice-lsp data tasks OUT --count N --seed S`: write generated tasks (correct by construction) as such pairs."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from dice_lsp.commands.arguments import device, number, positive
from dice_lsp.commands.errors import CommandError
from dice_lsp.commands.terminal import shown
from dice_lsp.engine.errors import EngineError
from dice_lsp.evaluation.sources import write_atomically
from dice_lsp.harness import Options
from dice_lsp.train.curate import curate, journal_path
from dice_lsp.train.tasks import FAMILIES, SPLITS, generate, speed_weights


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("data", help="prepare training data")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    curate = actions.add_parser("curate", help="filter {reference, solution} pairs through the harness")
    curate.add_argument("source", metavar="IN", help="JSONL of {reference, solution}")
    curate.add_argument("target", metavar="OUT", help="JSONL of the kept pairs (with their speedup)")
    curate.add_argument("--min-speedup", type=number(), default=2.0, help="speedup over eager PyTorch (0 = any)")
    curate.add_argument("--device", type=device, default="auto", help="auto, cpu, cuda or cuda:N")
    curate.add_argument("--sandbox", choices=("require", "auto", "off"), default="require",
                        help="the pairs' code runs in a bubblewrap sandbox: require (default: refuse without it), "
                             "auto (without it where it cannot start, with a warning), off")
    curate.add_argument("--workers", type=positive, default=None, help="parallel builds (default: all cores)")
    curate.add_argument("--json", action="store_true", help="print the counts as JSON")
    curate.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    curate.add_argument("--force", action="store_true", help="replace OUT where it exists (default: refuse)")
    curate.set_defaults(run=run_curate)
    tasks = actions.add_parser("tasks", help="generate KernelBench tasks with solutions correct by construction")
    tasks.add_argument("target", metavar="OUT", help="JSONL of {reference, solution, family, template, split}")
    tasks.add_argument("--count", type=positive, default=100, help="how many tasks (default 100)")
    tasks.add_argument("--seed", type=int, default=0, help="the same seed writes the same tasks")
    tasks.add_argument("--families", nargs="+", default=None, metavar="FAMILY",
                       help=f"op families (default: all): {' '.join(FAMILIES)}")
    tasks.add_argument("--split", choices=SPLITS, default="train",
                       help="which split to write (default: train): heldout holds out op combinations, "
                            "heldout-style holds out phrasings and layouts of the problem file (training ops "
                            "written in ways no training task is); all is train and heldout. Held-out tasks "
                            "never enter training")
    tasks.add_argument("--kernelbench", action="store_true",
                       help="OUT is a folder in KernelBench layout for `dice-lsp eval`: "
                            "OUT/levelN/K_family_template.py "
                            "(fusions are level 2, the rest level 1), and the known-good solutions under "
                            "OUT/solutions/ for `eval --solutions`")
    tasks.add_argument("--favor-fast", metavar="SPEEDUPS", default=None,
                       help="JSON of measured template speedups against eager (benchmarks/tasks_verify.py --json): "
                            "draw each template in proportion to its speedup, clamped to 0.25-2")
    tasks.add_argument("--json", action="store_true", help="print what was written (count, split, families) as JSON")
    tasks.add_argument("--force", action="store_true",
                       help="replace OUT where it exists (default: refuse): a file is written anew; with "
                            "--kernelbench, the problem and solution files already in OUT's level folders go first")
    tasks.set_defaults(run=run_tasks)


def run_curate(args: argparse.Namespace) -> int:
    _writable_file(Path(args.target), args.force)  # before the checks, which may take hours
    options = Options(device=args.device, baseline="eager" if args.min_speedup > 0 else "none", sandbox=args.sandbox)
    try:
        result = curate(args.source, args.min_speedup, options, args.workers, progress=not args.no_progress,
                        journal=journal_path(args.target), tell=lambda line: print(shown(line), file=sys.stderr))
    except EngineError as error:
        raise CommandError(str(error)) from None
    try:
        write_atomically(Path(args.target), "".join(result.lines))
    except OSError as error:
        raise CommandError(f"cannot write {args.target}: {error.strerror or error}") from None
    journal_path(args.target).unlink(missing_ok=True)  # its checks are in OUT now
    if args.json:
        print(json.dumps({"kept": result.kept, "total": result.total, "dropped": result.reasons}, indent=2))
        return 0
    print(shown(f"kept {result.kept} of {result.total} pairs -> {args.target}"))
    for reason, count in sorted(result.reasons.items(), key=lambda item: -item[1]):
        print(shown(f"  dropped {count:5d}  {reason}"))
    return 0


def run_tasks(args: argparse.Namespace) -> int:
    weights = None
    if args.favor_fast:
        try:
            speedups = json.loads(Path(args.favor_fast).read_text(encoding="utf-8"))
        except OSError as error:
            raise CommandError(f"cannot read {args.favor_fast}: {error.strerror or error}") from None
        except ValueError as error:
            raise CommandError(f"{args.favor_fast} is not JSON: {error}") from None
        if not isinstance(speedups, dict) or not all(v is None or isinstance(v, (int, float))
                                                    for v in speedups.values()):
            raise CommandError(f"{args.favor_fast} must map \"family/template\" to a speedup (a number or null)")
        weights = speed_weights(speedups)
    target = Path(args.target)
    stale: list[Path] = []
    if args.kernelbench:
        stale = _kernelbench_files(target, args.force)
    else:
        _writable_file(target, args.force)
    try:
        tasks = generate(args.seed, args.count, args.families, args.split, weights)
    except EngineError as error:
        raise CommandError(str(error)) from None
    try:
        for path in stale:
            path.unlink()
        if args.kernelbench:
            write_kernelbench(tasks, target)
        else:
            write_atomically(target, "".join(json.dumps(task.record()) + "\n" for task in tasks))
    except OSError as error:
        raise CommandError(f"cannot write {args.target}: {error.strerror or error}") from None
    families = dict(sorted(Counter(task.family for task in tasks).items()))
    if args.json:
        print(json.dumps({"wrote": len(tasks), "split": args.split, "target": str(args.target),
                          "kernelbench": args.kernelbench, "families": families}, indent=2))
        return 0
    print(shown(f"wrote {len(tasks)} {args.split} tasks -> {args.target}"))
    for family, count in families.items():
        print(f"  {family:<11} {count:5d}")
    return 0


def _writable_file(target: Path, force: bool) -> None:
    """Refuse to write over an existing file unless `force`: OUT may be a curated set that took hours to check."""
    if target.is_dir():
        raise CommandError(f"{target} is a folder; name a file for the JSONL (a KernelBench folder is --kernelbench)")
    if target.exists() and not force:
        raise CommandError(f"{target} exists; name a new file, or pass --force to replace it")


def _kernelbench_files(root: Path, force: bool) -> list[Path]:
    """The problem and solution files already in `root`'s level folders: new tasks written among them would be
    scored together by `eval` (tasks are numbered from 1 each time, so a smaller set leaves the old tail in place).
    Refused unless `force`, which removes them before the new ones are written."""
    if root.exists() and not root.is_dir():
        raise CommandError(f"{root} is a file; --kernelbench writes a folder")
    found = sorted([*root.glob("level*/*.py"), *root.glob("solutions/level*/*.py")])
    if found and not force:
        raise CommandError(f"{root} already holds {len(found)} problem and solution files ({found[0]}, ...); the new "
                           "tasks would be mixed with them: name a new folder, or pass --force to replace them")
    return found


def write_kernelbench(tasks, root: Path) -> None:
    """Tasks as problem files (reference only) and their solutions, named as `dice-lsp eval` reads them."""
    for index, task in enumerate(tasks, 1):
        level = f"level{2 if task.family == 'fusion' else 1}"
        name = f"{index}_{task.family}_{task.template}.py"
        for folder, text in ((root / level, task.reference), (root / "solutions" / level, task.solution)):
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text, encoding="utf-8")
