"""The harness's one error type; `kind` says what went wrong so callers can turn it into a report status.

Kinds: "timeout" (a stage ran past its limit), "died" (the worker process ended), "crashed" (the worker sent a reply
that does not decode: it is ended too), "cancelled", "setup", "refused" (the solution's worker asked for a build the
harness refuses, round its own load_inline: `harness.admission`).
"""

from __future__ import annotations


class HarnessError(Exception):
    """`stage`: the check's stage it ended ("build", "verify", "time", ...; "" when none is known)."""

    def __init__(self, message: str, kind: str = "setup", log: str = "", stage: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.log = log
        self.stage = stage
