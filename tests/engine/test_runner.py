"""Runners decide how a block's passes run: whether a finished block's K/V is written by a pass of its own or by the
next block's first pass changes no token and no trace, and a runner's kernels serve its own passes only.

Without a GPU the Triton kernels run under Triton's interpreter, which must be on before Triton compiles anything:
that check runs in a child process.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dice_lsp.engine import model as model_code
from dice_lsp.engine.checkpoint import load
from dice_lsp.engine.decode import CacheRunner, generate
from dice_lsp.engine.fast import GraphRunner

ROOT = Path(__file__).resolve().parents[2]

CASES = {
    "static greedy": dict(temperature=0),
    "dynamic greedy": dict(temperature=0, strategy="dynamic", threshold=0.12),
    "sampled": dict(temperature=1.0, top_k=0, top_p=0.95, seed=3),
    "block 8, 3 steps": dict(temperature=0, block_size=8, steps=3),
}


def check_same_decoding(loaded, runners, cases, max_new_tokens, one_prompt=True, prompt_tokens=None):
    """Every runner decodes what runners["plain"] does, token for token and step for step, on a batch of prompts of
    different lengths, and (one_prompt) of one prompt; prompt_tokens cuts the longest prompt short."""
    prompt = loaded.tokenizer.encode("<|im_start|>user\nfuse a softmax<|im_end|>\n<|im_start|>assistant\n")
    prompt = prompt[:prompt_tokens]
    batches = [[prompt, prompt[:6], prompt[:1]]] + ([[prompt]] if one_prompt else [])
    for name, args in cases.items():
        for prompts in batches:
            args = dict(args, max_new_tokens=max_new_tokens, stop_token_ids=())
            out = {label: generate(loaded.model, prompts, None, runner=runner, **args)
                   for label, runner in runners.items()}
            for label, generations in out.items():
                assert [(g.token_ids, g.trace) for g in generations] == \
                    [(g.token_ids, g.trace) for g in out["plain"]], (name, label)
                # Fused: one forward per pass, and the prefill. Plain: each block but the last also written alone.
                writes = generations[0].forwards - 1 - generations[0].steps
                assert writes == 0 if runners[label].fused_writes else writes > 0, (name, label)


INTERPRETED = r"""
from dice_lsp.engine import attention, fused
from dice_lsp.engine.checkpoint import load
from dice_lsp.engine.decode import CacheRunner
from dice_lsp.engine.fast import GraphRunner
from tests.engine.test_runner import check_same_decoding

calls = {"split attention": 0, "rotate and store": 0}


def counted(module, name, label):
    kernel = getattr(module, name)

    def call(*args, **kwargs):
        calls[label] += 1
        return kernel(*args, **kwargs)

    setattr(module, name, call)


counted(attention, "split_attention", "split attention")
counted(fused, "rotate_and_store", "rotate and store")
loaded = load(MODEL, device="cpu")
runners = {"plain": CacheRunner(loaded.model, fused_writes=False),
           "graph, plain writes": GraphRunner(loaded.model, fused_writes=False), "graph": GraphRunner(loaded.model)}
# Kept small, as the interpreter runs each program in numpy: three blocks, two passes each.
check_same_decoding(loaded, runners, {"greedy": dict(temperature=0, steps=2)}, 8, one_prompt=False, prompt_tokens=9)
assert all(calls.values()), calls
print("same decoding")
"""


def test_fused_writes_decode_what_separate_writes_decode(tiny_model_dir):
    loaded = load(str(tiny_model_dir), device="cpu")
    runners = {"plain": CacheRunner(loaded.model, fused_writes=False), "fused": CacheRunner(loaded.model),
               "graph, plain writes": GraphRunner(loaded.model, fused_writes=False),
               "graph": GraphRunner(loaded.model)}
    check_same_decoding(loaded, runners, CASES, 40)


@pytest.mark.slow  # about 40 s of CPU: the interpreter runs each program of the kernels in numpy
def test_fused_writes_with_the_triton_kernels_under_the_interpreter(tiny_model_dir):
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    code = f"MODEL = {str(tiny_model_dir)!r}\n" + INTERPRETED
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "same decoding" in done.stdout


def test_a_graph_runners_kernels_serve_its_own_passes_only(tiny_model_dir):
    loaded = load(str(tiny_model_dir), device="cpu")
    graph = GraphRunner(loaded.model)
    calls = []

    def counted(name):
        kernel = getattr(graph.kernels, name)
        return lambda *args: calls.append(name) or kernel(*args)

    names = [f.name for f in dataclasses.fields(graph.kernels)]
    graph.kernels = dataclasses.replace(graph.kernels, **{name: counted(name) for name in names})
    prompt = loaded.tokenizer.encode("<|im_start|>user\nfuse a softmax<|im_end|>\n")
    args = dict(temperature=0, max_new_tokens=8, stop_token_ids=())
    (fast,) = generate(loaded.model, [prompt], None, runner=graph, **args)
    assert set(calls) == set(names), "every piece of the graph runner's passes runs through its kernels"
    calls.clear()
    (plain,) = generate(loaded.model, [prompt], None, runner=CacheRunner(loaded.model), **args)
    assert calls == [] and plain.token_ids == fast.token_ids
    assert model_code.EAGER == model_code.Kernels() and model_code.EAGER.rms_norm is model_code.rms_norm
