"""Generation for the server, in a long-lived child process that keeps the model loaded between requests.

The server never imports torch or holds the model: a crash or out-of-memory in decoding ends the child, not the editor.
The messages both ways are dice_lsp/generation_messages.py.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import threading
import traceback
from typing import Callable

from dice_lsp.generation_messages import (
    TO_CHILD, TO_SERVER, Cancelled, Decoded, Done, Drafted, Job, JobFailed, JobProgress, Loading, Stop, expect,
)

log = logging.getLogger("dice_lsp")


class GenerationError(Exception):
    """Generation failed in a way the user can act on; `kind` groups messages shown once."""

    def __init__(self, message: str, kind: str = "generation") -> None:
        super().__init__(message)
        self.kind = kind


class GenerationCancelled(Exception):
    pass


def _child(connection, cancel_event) -> None:
    """The child's loop: load (and keep) the model, run jobs, stream progress back."""
    # Ctrl-C in the terminal that started the server reaches its whole process group, this child too: the server
    # decides what ends (it cancels the job and stops this child), not a KeyboardInterrupt in the middle of a block.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    loaded = {}
    while True:
        try:
            job = expect(connection.recv(), TO_CHILD)
        except (EOFError, OSError):
            return
        if isinstance(job, Stop):
            return
        cancel_event.clear()
        try:
            connection.send(Done(_run(job, loaded, connection, cancel_event)))
        except Exception as error:  # everything becomes a message for the user; the child lives on
            connection.send(failure_answer(error, job, loaded, cancel_event))


def failure_answer(error: Exception, job: Job, loaded: dict, cancel_event) -> Cancelled | JobFailed:
    """The child's answer to a job that raised `error`: Cancelled when the server had asked it to stop, else JobFailed
    with a message the user can act on (out of GPU memory also drops the loaded models)."""
    if isinstance(error, GenerationCancelled) or cancel_event.is_set():
        return Cancelled()
    trace = traceback.format_exc(limit=8)
    if "out of memory" in str(error).lower():
        loaded.clear()
        message = (f"the model does not fit in GPU memory ({job.model or 'bundled model'}): choose a smaller "
                   "checkpoint (DICE-1.7B needs about 4.1 GB in bf16, DICE-8B about 16 GB), a lower "
                   "dice.decoding.maxNewTokens, or set dice.device to cpu")
        return JobFailed("OutOfMemory", message, trace)
    kind = type(error).__name__
    return JobFailed("model" if kind == "EngineError" else kind, str(error) or kind, trace)


def _run(job: Job, loaded: dict, connection, cancel_event) -> tuple[Drafted, ...]:
    # Imported here, in the child only: the engine brings torch, which the server process must never load.
    from dice_lsp import engine
    from dice_lsp.engine.checkpoint import choose, load

    key = (job.model, job.device, job.dtype)
    if key not in loaded:
        loaded.clear()  # one model at a time: free the old one first
        connection.send(Loading(job.model))
        loaded[key] = load(choose(job.model), device=job.device, dtype=job.dtype)

    def on_block(event) -> None:
        connection.send(Decoded(event.blocks, max(event.tokens, default=0), event.seconds))

    drafts = engine.generate_kernel(
        job.reference, loaded[key], job.decoding, samples=job.samples,
        infill_skeleton=job.skeleton, on_block=on_block, cancel=cancel_event.is_set,
    )
    if cancel_event.is_set():
        raise GenerationCancelled()
    return tuple(Drafted(d.code, d.note, d.generation.text, len(d.generation.token_ids), d.generation.seconds)
                 for d in drafts)


class EngineWorker:
    """Runs Jobs one at a time in a child process; `run` blocks, so call it from a worker thread."""

    def __init__(self) -> None:
        self._context = multiprocessing.get_context("spawn")
        self._process = None
        self._connection = None
        self._cancel = None  # made with the first child: a semaphore starts multiprocessing's resource tracker
        self._lock = threading.Lock()

    def _ensure(self) -> None:
        if self._process is not None and self._process.is_alive():
            return
        if self._cancel is None:
            self._cancel = self._context.Event()
        parent, child = self._context.Pipe()
        self._process = self._context.Process(target=_child, args=(child, self._cancel), daemon=True,
                                              name="dice-lsp-engine")
        self._process.start()
        child.close()
        self._connection = parent

    def run(self, job: Job, on_progress: Callable[[JobProgress], None], cancelled: threading.Event
            ) -> tuple[Drafted, ...]:
        with self._lock:
            self._ensure()
            self._connection.send(job)
            while True:
                if cancelled.is_set():
                    self._cancel.set()
                message = self._receive()
                if message is None:
                    continue
                if isinstance(message, (Loading, Decoded)):
                    on_progress(message)
                elif isinstance(message, Done):
                    return message.drafts
                elif isinstance(message, Cancelled):
                    raise GenerationCancelled()
                else:
                    raise self._error(message)

    def _receive(self):
        """The child's next message, None when none came within 0.1 s; GenerationError when the child died."""
        try:
            ready = self._connection.poll(0.1)
        except (EOFError, OSError):
            ready = True
        if not ready:
            if self._process.is_alive():
                return None
            self._process = None
            raise GenerationError("the generation process died (out of memory?); see the server log", "worker-died")
        try:
            return expect(self._connection.recv(), TO_SERVER)
        except (EOFError, OSError):
            self._process = None
            raise GenerationError("the generation process died (out of memory?); see the server log",
                                  "worker-died") from None

    @staticmethod
    def _error(failed: JobFailed) -> GenerationError:
        """The child's failure as the server's error; its traceback goes to the server's log."""
        if failed.kind == "model":  # the engine's own message says what to fix; the trace is for debugging only
            log.info("generation failed: %s\n%s", failed.message, failed.trace)
        else:
            log.error("generation failed in the child process (%s): %s\n%s", failed.kind, failed.message,
                      failed.trace)
        return GenerationError(failed.message, failed.kind)

    def close(self) -> None:
        """Stop the child: its job is cancelled (decoding ends at the next block), then it is asked to exit, and
        killed when it has not within 2 s."""
        if self._process is not None and self._process.is_alive():
            self._cancel.set()
            try:
                self._connection.send(Stop())
                self._process.join(timeout=2)
            except (OSError, BrokenPipeError):
                pass
            if self._process.is_alive():
                self._process.kill()
        self._process = None
