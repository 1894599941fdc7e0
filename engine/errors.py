"""The engine's one error type: raised for anything a user can fix (a missing file, a shape mismatch, a bad setting).

Messages name what is missing or wrong and say what to do about it.
"""

from __future__ import annotations


class EngineError(Exception):
    """A user-facing engine failure; the message says what is wrong and how to fix it."""
