"""The messages between the server and its generation child process (dice_lsp/generation.py), one frozen dataclass
each: what the server asks (Job, Stop) and what the child answers (Loading, Decoded, Done, Cancelled, JobFailed).

Both ends are the same installed code (the child is spawned from it), so messages travel pickled and unversioned.
"""

from __future__ import annotations

from dataclasses import dataclass

from dice_lsp.settings import Decoding


class ProtocolError(Exception):
    """A message that is not in its direction's table: a bug in dice-lsp, never the user's doing."""


# -- server -> child -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Job:
    """Write kernels for a reference: end to end, or by infilling the core of `skeleton`."""

    reference: str  # the problem's text (class Model, get_inputs, ...)
    model: str  # a local path or hub id; "" for the bundled default
    device: str
    dtype: str
    decoding: Decoding
    skeleton: str | None = None  # a ModelNew skeleton to infill; None for end-to-end generation
    samples: int = 1


@dataclass(frozen=True)
class Stop:
    """Free the model and exit (the server is shutting down)."""


# -- child -> server -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Loading:
    """The child is loading a model (the first job, or the settings named another one)."""

    model: str  # as the job named it; "" for the bundled default

    def describe(self) -> str:
        return f"loading model {self.model or '(bundled default)'}"


@dataclass(frozen=True)
class Decoded:
    """Decoding committed another block."""

    blocks: int  # blocks committed so far
    tokens: int  # tokens written so far by the furthest sample
    seconds: float  # since decoding began

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def describe(self) -> str:
        text = f"{self.tokens} tokens, {self.blocks} blocks"
        return text + (f", {self.tokens_per_second:.0f} tok/s" if self.seconds > 0 else "")


JobProgress = Loading | Decoded  # what the child reports while a job runs


@dataclass(frozen=True)
class Drafted:
    """A generated sample as the server sees it: the kernel file, or None and why, plus the raw output."""

    code: str | None
    note: str
    raw: str
    tokens: int
    seconds: float


@dataclass(frozen=True)
class Done:
    drafts: tuple[Drafted, ...]


@dataclass(frozen=True)
class Cancelled:
    """The job stopped because the server asked it to."""


@dataclass(frozen=True)
class JobFailed:
    """The job failed; the child lives on. `kind` groups messages shown once; `trace` goes to the server's log."""

    kind: str  # "model" for the engine's user-facing errors, "OutOfMemory", or the exception's class name
    message: str
    trace: str = ""


# The tables: every message each side may receive. Anything else is a ProtocolError.
TO_CHILD: tuple[type, ...] = (Job, Stop)
TO_SERVER: tuple[type, ...] = (Loading, Decoded, Done, Cancelled, JobFailed)


def expect(message: object, table: tuple[type, ...]) -> object:
    """`message` when its type is in `table`; else ProtocolError."""
    if not isinstance(message, table):
        names = ", ".join(kind.__name__ for kind in table)
        raise ProtocolError(f"unexpected message {type(message).__name__} (expected one of {names})")
    return message
