"""The generation child's messages: typed both ways, failures carry their traceback to the server's log, and a
cancel is told apart from an error."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from dice_lsp.engine.errors import EngineError
from dice_lsp.generation import EngineWorker, GenerationCancelled, GenerationError, failure_answer
from dice_lsp.generation_messages import (
    TO_CHILD, TO_SERVER, Cancelled, Decoded, Job, JobFailed, ProtocolError, expect,
)
from dice_lsp.settings import Decoding

PROBLEM = (Path(__file__).parent / "files" / "relu.py").read_text()


def job(model: str = "") -> Job:
    return Job(reference=PROBLEM, model=model, device="cpu", dtype="auto", decoding=Decoding())


def failure_of(error: Exception, cancelled: bool = False, loaded: dict | None = None):
    event = threading.Event()
    if cancelled:
        event.set()
    try:
        raise error
    except Exception as raised:  # as the child's loop catches it
        return failure_answer(raised, job(), loaded if loaded is not None else {}, event)


def test_a_cancel_is_cancelled_whatever_was_raised():
    assert failure_of(GenerationCancelled()) == Cancelled()
    assert failure_of(RuntimeError("interrupted"), cancelled=True) == Cancelled()


def test_failures_say_what_failed_and_carry_the_trace():
    failed = failure_of(EngineError("no checkpoint directory x"))
    assert (failed.kind, failed.message) == ("model", "no checkpoint directory x")
    assert "Traceback" in failed.trace and "EngineError" in failed.trace
    assert failure_of(ValueError()).kind == failure_of(ValueError()).message == "ValueError"
    loaded = {("m", "cuda", "auto"): object()}
    memory = failure_of(RuntimeError("CUDA out of memory. Tried to allocate 2 GiB"), loaded=loaded)
    assert memory.kind == "OutOfMemory" and "dice.device to cpu" in memory.message and loaded == {}


def test_each_side_takes_only_the_messages_of_its_table():
    assert expect(Decoded(1, 4, 0.1), TO_SERVER) == Decoded(1, 4, 0.1)
    with pytest.raises(ProtocolError, match="expected one of Job, Stop"):
        expect(Decoded(1, 4, 0.1), TO_CHILD)
    with pytest.raises(ProtocolError):
        expect(("done", []), TO_SERVER)  # the old tuple protocol is gone
    assert Decoded(3, 12, 0.5).describe() == "12 tokens, 3 blocks, 24 tok/s"
    assert Decoded(1, 4, 0.0).describe() == "4 tokens, 1 blocks"


def test_the_childs_traceback_reaches_the_server_log(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="dice_lsp")
    worker = EngineWorker()
    try:
        with pytest.raises(GenerationError) as raised:
            worker.run(job(str(tmp_path / "no-such-model")), lambda message: None, threading.Event())
    finally:
        worker.close()
    assert raised.value.kind == "model" and "no-such-model" in str(raised.value)
    [record] = [r for r in caplog.records if "generation failed" in r.getMessage()]
    assert "Traceback (most recent call last)" in record.getMessage() and "no-such-model" in record.getMessage()


def test_an_unexpected_error_is_logged_as_an_error_with_its_trace(caplog):
    error = EngineWorker._error(JobFailed("KeyError", "'x'", "Traceback ...\nKeyError: 'x'"))
    assert isinstance(error, GenerationError) and error.kind == "KeyError"
    [record] = caplog.records
    assert record.levelno == logging.ERROR and "KeyError: 'x'" in record.getMessage()
