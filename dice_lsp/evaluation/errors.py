"""The evaluation's one error type: a problem set, solutions folder or output folder that eval cannot use.

Messages say which path is wrong and what to do about it; the CLI prints them as one line.
"""

from __future__ import annotations


class EvaluationError(Exception):
    """A user-facing evaluation failure; the message names the path or setting and how to fix it."""
