"""One JSON line per evaluated sample (`samples.jsonl`), appended as each finishes so a killed run resumes.

A record holds the problem, level, sample index, the kernel's text, the harness's full `Report` and what the sample
cost: generating, building and checking it, in seconds.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from dice_lsp.harness.report import Report

from dice_lsp.evaluation.errors import EvaluationError

Key = tuple[int, str, int]  # (level, problem, sample)


@dataclass(frozen=True)
class SampleRecord:
    """What eval knows about one sample of one problem."""

    level: int
    problem: str  # the problem file's stem
    sample: int  # 0-based
    kernel: str  # the solution file's text; "" when generation produced no usable code
    report: Report
    source: str = ""  # the solution file it came from, or "generated"
    note: str = ""  # why `kernel` is empty, or how it was obtained
    seconds: float = 0.0  # generation time of this sample's batch, shared by its samples
    build_s: float = 0.0  # building its kernel before the check (shared by samples of the same text); 0: not built
    check_s: float = 0.0  # its check, whose own build stage then only finds the cache entry; 0: not checked

    @property
    def key(self) -> Key:
        return (self.level, self.problem, self.sample)

    def to_json(self) -> str:
        return json.dumps({"level": self.level, "problem": self.problem, "sample": self.sample,
                           "kernel": self.kernel, "source": self.source, "note": self.note,
                           "seconds": round(self.seconds, 4), "build_s": round(self.build_s, 4),
                           "check_s": round(self.check_s, 4), "report": json.loads(self.report.to_json())},
                          sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SampleRecord:
        raw = json.loads(text)
        return cls(level=int(raw["level"]), problem=raw["problem"], sample=int(raw["sample"]),
                   kernel=raw.get("kernel", ""), report=Report.from_json(raw["report"]),
                   source=raw.get("source", ""), note=raw.get("note", ""), seconds=float(raw.get("seconds", 0.0)),
                   build_s=float(raw.get("build_s", 0.0)), check_s=float(raw.get("check_s", 0.0)))


class RecordLog:
    """The append-only `samples.jsonl` of an output folder, held under an exclusive lock while open.

    A line cut short by a kill is ignored on reading; a key written twice keeps its last record.
    """

    NAME = "samples.jsonl"

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folder / self.NAME
        self._lock_file: Any = None
        self._file: Any = None

    def __enter__(self) -> RecordLog:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._lock_file = open(self.folder / ".lock", "w")
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock_file.close()
            raise EvaluationError(f"another dice-lsp eval is writing to {self.folder}; wait for it or use another "
                                  "--out") from None
        self._file = open(self.path, "a+", encoding="utf-8")
        self._file.seek(0, os.SEEK_END)
        if self._file.tell() > 0:
            self._file.seek(self._file.tell() - 1)
            if self._file.read(1) != "\n":  # a kill cut the last line short: start the next one on its own line
                self._file.write("\n")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            self._file.close()
        if self._lock_file is not None:
            self._lock_file.close()

    def append(self, record: SampleRecord) -> None:
        self._file.write(record.to_json() + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())


def read_records(folder: Path) -> dict[Key, SampleRecord]:
    """The finished samples in an output folder, by key; an absent log is an empty one."""
    path = folder / RecordLog.NAME
    if not path.is_file():
        return {}
    return {record.key: record for record in _lines(path)}


def _lines(path: Path) -> Iterator[SampleRecord]:
    with open(path, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if not line.strip():
                continue
            try:
                yield SampleRecord.from_json(line)
            except (ValueError, KeyError, TypeError):
                continue  # the line a kill cut short
