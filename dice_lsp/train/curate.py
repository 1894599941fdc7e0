"""CuKe's filter: keep the pairs whose solution builds, is correct, shows no deception and reaches a speedup.

Runs the harness in batch mode over a JSONL of {reference, solution}; says how many were dropped and why.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tqdm import tqdm

from dice_lsp import __version__
from dice_lsp.harness import Options, Report, check_each
from dice_lsp.train.data import read_pairs
from dice_lsp.train.errors import TrainError


@dataclass
class Curation:
    kept: int = 0
    total: int = 0
    reasons: dict[str, int] = field(default_factory=dict)  # why pairs were dropped, with counts
    lines: list[str] = field(default_factory=list)  # the kept records, JSONL lines with their speedup, in IN's order


def verdict(report: Report, min_speedup: float) -> str | None:
    """None to keep the pair, else the reason it is dropped."""
    if report.status != "correct":
        return report.status
    deceptions = sorted({f.code for f in report.findings if getattr(f, "severity", "") == "error"})
    if deceptions:
        return "deceptive: " + ", ".join(deceptions)
    if min_speedup > 0:
        if report.speedup_eager is None:
            return "no timing (speedup unknown; time on a GPU or use --min-speedup 0)"
        if report.speedup_eager < min_speedup:
            return f"speedup below {min_speedup:g}x"
    return None


def journal_path(target) -> Path:
    """Where a curation into `target` keeps each finished check until it writes `target`: beside it, hidden."""
    target = Path(target)
    return target.with_name(f".{target.name}.checked.jsonl")


def _key(options: Options, reference: str, solution: str) -> str:
    """A check's identity: the pair, every option that shapes its report, and the dice-lsp that checked it."""
    text = json.dumps([__version__, repr(options), reference, solution])
    return hashlib.sha256(text.encode()).hexdigest()


def _journaled(journal: Path) -> dict[str, Report]:
    """The reports an earlier run of the same curation finished; a line cut short by a kill is skipped."""
    done = {}
    try:
        lines = journal.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return done
    for line in lines:
        try:
            entry = json.loads(line)
            done[entry["key"]] = Report.from_json(entry["report"])
        except (ValueError, KeyError, TypeError):
            continue
    return done


class _Journal:
    """The journal open for appending, each finished check a line of its own; an error opening or writing it names
    the journal (and no other error is taken for one)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.file = open(path, "a+b")
            if self.file.tell() and (self.file.seek(-1, os.SEEK_END), self.file.read(1))[1] != b"\n":
                self.file.write(b"\n")  # a line a kill cut short: the next starts afresh
        except OSError as error:
            self._failed(error)

    def add(self, key: str, report: Report) -> None:
        line = json.dumps({"key": key, "report": json.loads(report.to_json())}) + "\n"
        try:
            self.file.write(line.encode())
            self.file.flush()
        except OSError as error:
            self._failed(error)

    def close(self) -> None:
        self.file.close()

    def _failed(self, error: OSError) -> None:
        raise TrainError(f"cannot write the curation's journal {self.path}: {error.strerror or error}") from None


def curate(source, min_speedup: float = 2.0, options: Options | None = None, workers: int | None = None,
           progress: bool = False, journal: Path | None = None,
           tell: Callable[[str], None] = lambda line: None) -> Curation:
    """Check every pair in batch mode (all built first, then each checked) and keep the ones that pass (`verdict`);
    `progress` shows a bar on stderr that moves as each check ends. `journal`: a file each finished check is
    appended to as it ends, and read first, so a curation stopped midway (hours of checks on a large set) goes on
    where it stopped; a pair and options it holds are not checked again (`tell` hears how many, before the checks
    start)."""
    pairs = read_pairs(source)
    # model-written candidates: only inside the sandbox, never without it
    options = options or Options(baseline="eager" if min_speedup > 0 else "none", sandbox="require")
    keys = [_key(options, p.reference, p.solution) for p in pairs]
    earlier = _journaled(journal) if journal is not None else {}
    reports: list[Report | None] = [earlier.get(key) for key in keys]
    todo = [index for index, report in enumerate(reports) if report is None]
    if len(todo) < len(pairs):
        tell(f"resuming: {len(pairs) - len(todo)} of {len(pairs)} pairs were checked by an earlier run ({journal})")
    with contextlib.ExitStack() as stack:
        log = stack.enter_context(contextlib.closing(_Journal(journal))) if journal is not None and todo else None
        bar = stack.enter_context(tqdm(total=len(pairs), initial=len(pairs) - len(todo), unit="pair",
                                       desc="building, then checking", disable=not progress, dynamic_ncols=True))
        checks = check_each([(pairs[i].reference, pairs[i].solution) for i in todo], options, workers) if todo \
            else iter(())
        for position, report in checks:
            index = todo[position]
            reports[index] = report
            if log is not None:
                log.add(keys[index], report)
            bar.set_description("checking")
            bar.update()
    result = Curation(total=len(pairs))
    raw_lines = [line for line in Path(source).read_text(encoding="utf-8").splitlines() if line.strip()]
    for raw, report in zip(raw_lines, reports):
        reason = verdict(report, min_speedup)
        if reason is not None:
            result.reasons[reason] = result.reasons.get(reason, 0) + 1
            continue
        record = json.loads(raw)
        record["speedup"] = report.speedup_eager
        result.lines.append(json.dumps(record) + "\n")
        result.kept += 1
    return result
