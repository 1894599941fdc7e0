"""The bundled default model: shipped small enough, loaded when no model is configured, and it writes a kernel that
anatomy reads as an honest solution (CPU decoding, the server's default settings)."""

from __future__ import annotations

import pytest

from dice_lsp import engine
from dice_lsp.anatomy import parse
from dice_lsp.engine.checkpoint import BUNDLED, choose, load
from dice_lsp.train.tasks import render

pytestmark = pytest.mark.skipif(not (BUNDLED / "model.safetensors").is_file(), reason="no bundled model in this tree")


@pytest.fixture(scope="module")
def bundled():
    return load(choose(""), device="cpu")


def test_bundled_model_is_the_default_and_small(bundled, monkeypatch):
    monkeypatch.delenv("DICE_LSP_DEFAULT_MODEL", raising=False)
    assert choose("") == str(BUNDLED) and bundled.path == BUNDLED
    weights = sum(p.stat().st_size for p in BUNDLED.glob("*.safetensors"))
    assert weights <= 60e6 and bundled.config.block_size == 4
    assert (BUNDLED / "README.md").read_text().count("DICE-1.7B") >= 1


@pytest.mark.parametrize("family, template", [("activation", "one_per_thread"), ("softmax", "warp_row")])
def test_bundled_model_writes_a_bound_kernel_for_a_held_out_task(bundled, family, template):
    task = next(t for t in (render(family, template, seed) for seed in range(200)) if t.split == "heldout")
    (draft,) = engine.generate_kernel(task.reference, bundled)
    assert draft.code is not None, draft.note
    anatomy = parse(draft.code, reference=task.reference)
    assert anatomy.is_solution and anatomy.extensions and not anatomy.syntax_errors
    kernels = [f for e in anatomy.extensions for s in e.cuda_sources for f in s.functions if f.kind == "global"]
    assert kernels, "no __global__ kernel"
    assert not [f for f in anatomy.findings if f.severity == "error"], anatomy.findings
