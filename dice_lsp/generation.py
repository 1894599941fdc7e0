"""Generation for the server, in a long-lived child process that keeps the model loaded between requests.

The server never imports torch or holds the model: a crash or out-of-memory in decoding ends the child, not the editor.
"""

from __future__ import annotations

import multiprocessing
import threading
import traceback
from dataclasses import asdict, dataclass
from typing import Callable


@dataclass(frozen=True)
class GenerationJob:
    reference: str  # the problem's text (class Model, get_inputs, ...)
    model: str  # a local path or hub id; "" for the bundled default
    device: str
    dtype: str
    decoding: dict  # dice_lsp.settings.Decoding as a dict
    skeleton: str | None = None  # a ModelNew skeleton to infill; None for end-to-end generation
    samples: int = 1


class GenerationError(Exception):
    """Generation failed in a way the user can act on; `kind` groups messages shown once."""

    def __init__(self, message: str, kind: str = "generation") -> None:
        super().__init__(message)
        self.kind = kind


class GenerationCancelled(Exception):
    pass


def _child(connection, cancel_event) -> None:
    """The child's loop: load (and keep) the model, run jobs, stream progress back."""
    loaded = {}
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        job = GenerationJob(**message)
        cancel_event.clear()
        try:
            texts = _run(job, loaded, connection, cancel_event)
            connection.send(("done", texts))
        except Exception as error:  # everything becomes a message for the user; the child lives on
            kind = type(error).__name__
            if kind == "Cancelled" or cancel_event.is_set():
                connection.send(("cancelled", None))
            elif "out of memory" in str(error).lower():
                loaded.clear()
                message = (f"the model does not fit in GPU memory ({job.model or 'bundled model'}): choose a smaller "
                           "checkpoint (DICE-1.7B needs about 4.1 GB in bf16, DICE-8B about 16 GB), a lower "
                           "dice.decoding.maxNewTokens, or set dice.device to cpu")
                connection.send(("error", ("OutOfMemory", message, "")))
            else:
                connection.send(("error", (kind, str(error) or kind, traceback.format_exc(limit=5))))


def _run(job: GenerationJob, loaded: dict, connection, cancel_event) -> list[str]:
    from dice_lsp import engine
    from dice_lsp.engine.checkpoint import choose, load

    from dice_lsp.settings import Decoding

    key = (job.model, job.device, job.dtype)
    if key not in loaded:
        loaded.clear()  # one model at a time: free the old one first
        connection.send(("progress", {"message": f"loading model {job.model or '(bundled default)'}"}))
        loaded[key] = load(choose(job.model), device=job.device, dtype=job.dtype)

    def on_block(event) -> None:
        connection.send(("progress", {"blocks": event.blocks, "tokens": max(event.tokens, default=0),
                                      "seconds": event.seconds}))

    drafts = engine.generate_kernel(
        job.reference, loaded[key], Decoding(**job.decoding), samples=job.samples,
        infill_skeleton=job.skeleton, on_block=on_block, cancel=cancel_event.is_set,
    )
    if cancel_event.is_set():
        raise GenerationCancelled()
    return [Drafted(d.code, d.note, d.generation.text, len(d.generation.token_ids), d.generation.seconds)
            for d in drafts]


@dataclass(frozen=True)
class Drafted:
    """A generated sample as the server sees it: the kernel file, or None and why, plus the raw output."""

    code: str | None
    note: str
    raw: str
    tokens: int
    seconds: float


class EngineWorker:
    """Runs GenerationJobs one at a time in a child process; `run` blocks, so call it from a worker thread."""

    def __init__(self) -> None:
        self._context = multiprocessing.get_context("spawn")
        self._process = None
        self._connection = None
        self._cancel = self._context.Event()
        self._lock = threading.Lock()

    def _ensure(self) -> None:
        if self._process is not None and self._process.is_alive():
            return
        parent, child = self._context.Pipe()
        self._process = self._context.Process(target=_child, args=(child, self._cancel), daemon=True,
                                              name="dice-lsp-engine")
        self._process.start()
        child.close()
        self._connection = parent

    def run(self, job: GenerationJob, on_progress: Callable[[dict], None], cancelled: threading.Event
            ) -> list[Drafted]:
        with self._lock:
            self._ensure()
            self._connection.send(asdict(job))
            while True:
                if cancelled.is_set():
                    self._cancel.set()
                try:
                    ready = self._connection.poll(0.1)
                except (EOFError, OSError):
                    ready = True
                if not ready:
                    if not self._process.is_alive():
                        self._process = None
                        raise GenerationError("the generation process died (out of memory?); see the server log",
                                              "worker-died")
                    continue
                try:
                    kind, payload = self._connection.recv()
                except (EOFError, OSError):
                    self._process = None
                    raise GenerationError("the generation process died (out of memory?); see the server log",
                                          "worker-died") from None
                if kind == "progress":
                    on_progress(payload)
                elif kind == "done":
                    return payload
                elif kind == "cancelled":
                    raise GenerationCancelled()
                else:
                    error_kind, message, trace = payload
                    raise GenerationError(message, "model" if error_kind == "EngineError" else error_kind)

    def close(self) -> None:
        if self._process is not None and self._process.is_alive():
            try:
                self._connection.send(None)
                self._process.join(timeout=2)
            except (OSError, BrokenPipeError):
                pass
            if self._process.is_alive():
                self._process.kill()
        self._process = None
