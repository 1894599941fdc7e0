"""`dice-lsp check REFERENCE [SOLUTION] [--json]`: build, verify, time and inspect a solution against its problem.

With one file: a solution that links its reference (`# dice: reference = path`) or holds Model too, or a problem whose
solution is its sibling `<name>_dice.py`.
"""

from __future__ import annotations

import argparse
import queue
from pathlib import Path

from dice_lsp import harness
from dice_lsp.anatomy import LineIndex, find_reference, parse
from dice_lsp.checking import STAGE_WORDS
from dice_lsp.commands.arguments import count, device, number, positive
from dice_lsp.commands.errors import CommandError
from dice_lsp.commands.inspect import read_linked, read_source
from dice_lsp.commands.progress import ProgressLine, add_progress_option
from dice_lsp.commands.terminal import shown
from dice_lsp.harness import Options


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("check", help="build, verify and time a solution against its reference")
    parser.add_argument("reference", type=Path, help="the problem file (Model, get_inputs), or a solution file")
    parser.add_argument("solution", type=Path, nargs="?", help="the solution file (ModelNew)")
    parser.add_argument("--json", action="store_true", help="print the Report as JSON")
    add_progress_option(parser)
    add_check_options(parser)
    parser.set_defaults(run=run)


def add_check_options(group, baseline: str | None = None, baseline_help: str = "which references to time",
                      sandbox: str | None = None) -> None:
    """The harness's flags, shared by every command that checks kernels (check, eval), with the harness's own
    defaults (harness.Options owns them). `baseline`, `sandbox`: a command's own default where it differs from the
    harness's (eval times against eager only, and runs a model's code only in the sandbox)."""
    owner = Options()
    baseline, sandbox = baseline or owner.baseline, sandbox or owner.sandbox
    group.add_argument("--trials", type=positive, default=owner.correctness_trials,
                       help="correctness trials (default %(default)s)")
    group.add_argument("--timing-trials", type=count, default=owner.timing_trials,
                       help="timed trials per side (default %(default)s; 0, with --baseline none, times nothing)")
    group.add_argument("--tolerance", type=number(), default=owner.atol,
                       help="atol = rtol for allclose (default %(default)g)")
    group.add_argument("--baseline", choices=("eager", "compile", "both", "none"), default=baseline,
                       help=f"{baseline_help} (default %(default)s)")
    group.add_argument("--device", type=device, default=owner.device,
                       help="auto, cpu, cuda or cuda:N (default %(default)s)")
    group.add_argument("--tf32", action="store_true", help="allow TF32 matmuls, on both sides")
    group.add_argument("--build-timeout", type=number(low_open=True), default=owner.build_timeout,
                       help="seconds (default %(default)g)")
    group.add_argument("--run-timeout", type=number(low_open=True), default=owner.run_timeout,
                       help="seconds per run stage (default %(default)g)")
    group.add_argument("--plain-build", action="store_true", help="build with load_inline only, no light build")
    group.add_argument("--sandbox", choices=("auto", "require", "off"), default=sandbox,
                       help="run the code of both files in a bubblewrap sandbox: auto (where it can start, with a "
                            f"warning where not), require (refuse to run without it), off (default {sandbox})")


def options_from(args: argparse.Namespace) -> Options:
    """harness.Options from the flags `add_check_options` added, before anything is built."""
    if args.timing_trials == 0 and args.baseline != "none":  # the harness would report a speedup of 0.00x
        raise CommandError(f"--timing-trials 0 times nothing, so there is no speedup against {args.baseline}: add "
                           "--baseline none, or time at least one trial")
    return Options(
        correctness_trials=args.trials, timing_trials=args.timing_trials, atol=args.tolerance, rtol=args.tolerance,
        baseline=args.baseline, device=args.device, tf32=args.tf32, build_timeout=args.build_timeout,
        run_timeout=args.run_timeout, light_build=not args.plain_build, sandbox=args.sandbox)


def locate(args: argparse.Namespace) -> tuple[Path, Path]:
    """(reference, solution) paths from one or two arguments."""
    if args.solution is not None:
        return args.reference, args.solution
    path = args.reference
    anatomy = parse(read_source(path))
    if anatomy.is_solution:  # its link, else its own Model: anatomy.find_reference's rule
        linked = read_linked(path, anatomy)  # a link to a FIFO, a device or a huge file: refused with its reason
        reference = linked[1] if linked is not None else find_reference(anatomy, path).path
        if reference is not None:
            return reference, path
        raise CommandError(f"{path} defines ModelNew but names no reference; pass the problem file first")
    sibling = path.with_name(f"{path.stem}_dice.py")
    if sibling.is_file():
        return path, sibling
    raise CommandError(f"no solution given and {sibling.name} does not exist; pass the solution file")


def run(args: argparse.Namespace) -> int:
    options = options_from(args)
    reference, solution = locate(args)
    solution_text = read_source(solution)
    # The one-file form's linked reference, read as the server reads it (never a FIFO, a device, a huge file)
    one_file = args.solution is None and solution == args.reference != reference
    linked = read_linked(solution, parse(solution_text)) if one_file else None
    reference_text = linked[0] if linked is not None else read_source(reference)
    progress = ProgressLine(args.progress)
    progress.stage(f"checking {solution}")
    try:
        report = check_in_background(reference_text, solution_text, options, progress)
    finally:
        progress.close()
    print(report.to_json() if args.json else render(report, solution, solution_text))
    return 0 if report.status in ("correct", "built-not-run") else 1


def check_in_background(reference: str, solution: str, options: Options, progress: ProgressLine) -> harness.Report:
    """The check on the harness's own thread, while this (the main) thread shows its stage and how long that has run,
    and takes the signals: a Ctrl-C or SIGTERM raised here never lands inside the harness's bookkeeping, and the
    check is cancelled (its solution worker killed, its reference worker closed) before the exception goes on.
    The harness's thread only queues its stages and its end; this thread alone writes to the terminal."""
    events: queue.SimpleQueue = queue.SimpleQueue()
    run = harness.Run(reference, solution, options, on_done=events.put, on_stage=events.put).start()
    subject = progress.current
    try:
        while True:
            try:
                event = events.get(timeout=1.0)
            except queue.Empty:
                progress.note(f"{progress.elapsed():.0f} s")
                continue
            if isinstance(event, harness.Report):
                break
            progress.stage(f"{subject}: {STAGE_WORDS.get(event, event)}")
    except BaseException:
        run.cancel()
        try:
            run.result(timeout=30.0)  # its workers are killed: it ends at its next look at them
        except harness.HarnessError:
            pass
        raise
    return run.result()


def render(report: harness.Report, solution: Path, text: str) -> str:
    """The report as text. Compiler messages placed in the solution and findings are lines of their own in the form
    compilers and linters print (`file:line:col: severity ...`, as `inspect` prints findings), which editors and CI
    problem matchers read; `text` is the solution as checked, which the findings' spans are offsets into."""
    index = LineIndex(text)

    def where(span) -> str:
        row, column = index.position(min(span.start, len(text)), "utf-32")
        return f"{solution}:{row + 1}:{column + 1}"

    lines = [f"{solution}: {report.summary()}"]
    for d in report.diagnostics:  # placed in the Python file, or (span None) in the generated file the compiler named
        place = f"{solution}:{d.line + 1}:{d.column + 1}" if d.span is not None or not d.file else \
            f"  {d.file}:{d.line + 1}:{d.column + 1} (generated)"
        lines.append(f"{place}: {d.severity}: {d.message}")
    for f in report.all_findings:
        lines.append(f"{where(f.span)}: {f.severity} [{f.code}] {f.message}")
    for t in report.trials:
        mark = "ok  " if t.passed else "FAIL"
        tag = " (inputs changed in place)" if t.changed_inputs else ""
        lines.append(f"  trial seed {t.seed}: {mark} max abs {t.max_abs_error:.3g}, rel L2 {t.relative_l2:.2g}"
                     f"{' at ' + t.where if not t.passed and t.where else ''}{' ' + t.note if t.note else ''}{tag}")
    for name, timing in report.timings.items():
        left = f", {timing.rounds_left_out} far slower round(s) left out" if timing.rounds_left_out else ""
        lines.append(f"  {name:9s} median {timing.median_ms:.4f} ms (IQR {timing.spread_ms:.4f}, "
                     f"{timing.trials} trials, {timing.clock}{left})")
    for k in report.kernels:
        whose = "" if k.own else " (torch)"
        lines.append(f"  kernel {k.name}: {k.share:.0%} of GPU time, {k.launches} launches{whose}")
    stages = ", ".join(f"{s.name} {s.seconds:.2f}s" for s in report.stages)
    lines.append(f"  device {report.device or '-'}, tf32 {report.tf32}, build {report.build_mode or '-'}"
                 f"{' (cached)' if report.build_cached else ''}; {stages}")
    if report.status in ("crashed", "compile-error", "invalid") and report.log:
        lines.append("  --- log ---")
        lines.extend("  " + line for line in report.log.strip().split("\n")[-15:])
    # Every line holds text a file or the candidate wrote (messages, findings, compiler output, kernel names, paths)
    return "\n".join(shown(line) for line in lines)
