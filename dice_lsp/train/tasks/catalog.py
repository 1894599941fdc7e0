"""The catalogue of templates: each (family, template id) maps to a function that draws one task's parameters and
writes its reference and solution; family modules register theirs here when imported.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

from dice_lsp.train.tasks.problem import Problem


@dataclass(frozen=True)
class RenderedTask:
    """One rendered task before its split is decided; `shape_class` names the parameter combination it belongs to."""

    reference: Problem
    solution: str
    shape_class: str


Maker = Callable[[random.Random], RenderedTask]

TEMPLATES: dict[tuple[str, str], Maker] = {}


def template(family: str, name: str) -> Callable[[Maker], Maker]:
    def register(maker: Maker) -> Maker:
        TEMPLATES[(family, name)] = maker
        return maker
    return register


def sizes(rng: random.Random, rank: int, total: tuple[int, int], multiple: int = 1) -> list[int]:
    """A shape of `rank` dims whose element count lies in `total` (a power-of-two range), the last dim a multiple
    of `multiple`; dims are mixed powers of two and odd sizes so bounds checks matter."""
    while True:
        shape = [rng.choice((3, 7, 16, 24, 32, 48, 64, 100, 128, 250)) for _ in range(rank - 1)]
        last = rng.choice((256, 384, 512, 1000, 1024, 2048, 4096, 4095, 8192))
        last -= last % multiple
        shape.append(last)
        count = 1
        for dim in shape:
            count *= dim
        if total[0] <= count <= total[1]:
            return shape


def size_class(shape: list[int]) -> str:
    count = 1
    for dim in shape:
        count *= dim
    return f"rank{len(shape)}-{'small' if count < 1 << 18 else 'large'}"


def shape_names(shape: list[int]) -> list[str]:
    """The names a reference gives the dims of a `shape` of rank 2, 3 or 4."""
    return (["batch_size", "dim"] if len(shape) == 2 else
            ["batch_size", "channels", "dim"] if len(shape) == 3 else ["batch_size", "channels", "height", "width"])
