"""Argument types that argparse checks while it parses, so a bad value is a usage error (exit 2, one line naming the
flag) before anything is built or loaded, never a harness crash or an engine traceback minutes later."""

from __future__ import annotations

import argparse
import re
from typing import Callable

_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


def at_least(low: int) -> Callable[[str], int]:
    """An integer >= `low`: `--trials 0` has nothing to verify, `--samples 0` nothing to write."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, not {value}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def number(low: float = 0.0, high: float = float("inf"), low_open: bool = False) -> Callable[[str], float]:
    """A float in [low, high], or (low, high] with `low_open`: a tolerance or a timeout cannot be negative."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, not {text!r}") from None
        if value != value or value > high or value < low or (low_open and value == low):  # NaN compares false
            bounds = f"{'above' if low_open else 'at least'} {low:g}" + (f" and at most {high:g}" if high < 1e308
                                                                          else "")
            raise argparse.ArgumentTypeError(f"must be {bounds}, not {text}")
        return value

    parse.__name__ = "number"
    return parse


def device(text: str) -> str:
    """Where to run: auto, cpu, cuda or cuda:N, the harness's and the engine's spelling."""
    if not _DEVICE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"must be auto, cpu, cuda or cuda:N, not {text!r}")
    return text


positive = at_least(1)
count = at_least(0)
