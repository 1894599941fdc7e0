"""The training package's one error type, a kind of EngineError so callers of the engine catch it too.

Messages say what is wrong (a bad JSONL line, a checkpoint that cannot resume) and what to do about it.
"""

from __future__ import annotations

from dice_lsp.engine.errors import EngineError


class TrainError(EngineError):
    """A user-facing training failure; the message says what is wrong and how to fix it."""
