"""KernelBench-format training tasks whose CUDA solutions are correct by construction: `generate(seed, count)`.

Each task comes from a template of an op family and is written in a layout (problem.py). Two things are held out
of training: op combinations ("heldout": a stable hash of family, template and shape class, so a held-out
combination never appears in training, whatever the seed) and layouts ("heldout-style": a reference that uses a
phrasing, name or layout option that no training task uses; its op combination is a training one, so the split
measures the phrasing alone).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import asdict, dataclass

from dice_lsp.train.errors import TrainError
from dice_lsp.train.tasks import attention, channel_norm, conv, elementwise, fusion, loss, matmul, norm, pooling, \
    reduce, scan, softmax, strided, vector_norm  # noqa: F401  (they register templates)
from dice_lsp.train.tasks.catalog import TEMPLATES
from dice_lsp.train.tasks.problem import sample_layout, shown, write

FAMILIES = ("unary", "binary", "activation", "reduction", "softmax", "norm", "matmul", "fusion", "pooling", "scan",
            "loss", "conv", "attention")
HELDOUT_PERCENT = 20
SPLITS = ("train", "heldout", "heldout-style", "all")  # "all": train and heldout, in training layouts


@dataclass(frozen=True)
class Task:
    """One generated problem and its solution, as a line of the training JSONL."""

    family: str
    template: str
    shape_class: str
    split: str  # "train", "heldout" or "heldout-style"
    reference: str
    solution: str
    style: str  # the reference's layout (problem.Layout.key)

    def record(self) -> dict[str, str]:
        """The JSONL line: what `dice-lsp data curate` and `train sft` read, plus where it came from."""
        return {key: value for key, value in asdict(self).items()}


def split_of(family: str, template: str, shape_class: str) -> str:
    digest = hashlib.sha256(f"{family}|{template}|{shape_class}".encode()).digest()
    return "heldout" if int.from_bytes(digest[:4], "big") % 100 < HELDOUT_PERCENT else "train"


def templates(family: str) -> list[str]:
    return sorted(name for fam, name in TEMPLATES if fam == family)


def render(family: str, template: str, seed: int, heldout_style: bool = False, size: str | None = None) -> Task:
    """The task one template draws from `seed`; the same arguments give the same task. The op comes from `seed`
    alone, the layout from `seed` and `heldout_style`; `size` ("tiny", "drawn", "large") overrides the layout's."""
    if (family, template) not in TEMPLATES:
        raise TrainError(f"no template {family}/{template}; templates are "
                         + ", ".join(f"{f}/{t}" for f, t in sorted(TEMPLATES)))
    rendered = TEMPLATES[(family, template)](random.Random(f"{family}/{template}/{seed}"))
    rng = random.Random(f"layout/{family}/{template}/{seed}/{heldout_style}")
    layout = sample_layout(rng, heldout_style, size)
    text = write(rendered.reference, layout, rng)
    layout = shown(rendered.reference, layout)
    split = split_of(family, template, rendered.shape_class)
    if layout.heldout:
        split = "heldout-style" if split == "train" else "heldout-both"
    return Task(family, template, rendered.shape_class, split, text, rendered.solution, layout.key)


def speed_weights(speedups: dict[str, float | None], floor: float = 0.25, cap: float = 2.0) -> dict[str, float]:
    """Template weights from measured speedups against eager ("family/template" -> median speedup, as
    benchmarks/tasks_verify.py --json writes): a template is drawn in proportion to its speedup, clamped to
    [floor, cap], so slow solutions stay in the data (for variety) but the model sees fast ones more often."""
    weights = {}
    for key, speedup in speedups.items():
        if speedup is not None:
            weights[key] = min(cap, max(floor, float(speedup)))
    return weights


def generate(seed: int, count: int, families: list[str] | tuple[str, ...] | None = None,
             split: str = "all", weights: dict[str, float] | None = None) -> list[Task]:
    """`count` distinct tasks of `split`, the families taken in turn and a template drawn for each; reproducible.
    `weights` ("family/template" -> relative weight, 1 when missing) draws some templates more often than others."""
    chosen = tuple(families) if families else FAMILIES
    unknown = [f for f in chosen if f not in FAMILIES]
    if unknown:
        raise TrainError(f"unknown task families {', '.join(unknown)}; choose from {', '.join(FAMILIES)}")
    if split not in SPLITS:
        raise TrainError(f"unknown split {split!r}; choose {', '.join(SPLITS)}")
    for key, weight in (weights or {}).items():
        family, _, name = key.partition("/")
        if (family, name) not in TEMPLATES:
            raise TrainError(f"template weight for {key!r}, which is no template (write family/template)")
        if weight < 0:
            raise TrainError(f"template weight for {key} is negative ({weight})")
    rng = random.Random(seed)
    tasks: list[Task] = []
    seen: set[str] = set()
    attempts = 0
    while len(tasks) < count:
        attempts += 1
        if attempts > 50 * count + 100:
            raise TrainError(f"could only draw {len(tasks)} distinct {split} tasks of {', '.join(chosen)}; "
                             "ask for fewer or allow more families")
        family = chosen[len(tasks) % len(chosen)]
        task = render(family, _draw(rng, family, weights), rng.getrandbits(48), split == "heldout-style")
        if task.split not in ((split,) if split != "all" else ("train", "heldout")) or task.solution in seen:
            continue
        seen.add(task.solution)
        tasks.append(task)
    return tasks


def _draw(rng: random.Random, family: str, weights: dict[str, float] | None) -> str:
    names = templates(family)
    if not weights:
        return rng.choice(names)  # as before weights existed: the same seed still gives the same tasks
    chances = [weights.get(f"{family}/{name}", 1.0) for name in names]
    if not any(chances):
        raise TrainError(f"every template of {family} has weight 0; give one a weight or leave the family out")
    return rng.choices(names, chances)[0]
