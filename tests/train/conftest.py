"""Fixtures of the training tests: a toy set of KernelBench pairs, a C++-only pair the CPU harness builds, and the
cutoff that keeps each toy sample's whole prompt plus a short answer (the served prompts are long).

The tiny checkpoint is the session's shared `tiny_model_dir` (tests/conftest.py); training only reads it.
`sft_command` and `cli_env` run `dice-lsp train sft` as a user does, in one process or several under torchrun.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]

OPS = {"add": "a + b", "mul": "a * b", "sub": "a - b", "max": "fmaxf(a, b)"}

REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return {torch_expr}


def get_inputs():
    return [torch.randn(64), torch.randn(64)]


def get_init_inputs():
    return []
'''

SOLUTION = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

{name}_source = """
#include <torch/extension.h>

__global__ void {name}_kernel(const float* a, const float* b, float* out, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{ float x = a[i], y = b[i]; out[i] = {cuda_expr}; }}
}}

torch::Tensor {name}_cuda(torch::Tensor a, torch::Tensor b) {{
    auto out = torch::empty_like(a);
    int n = a.numel();
    {name}_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}}
"""

{name}_cpp_source = "torch::Tensor {name}_cuda(torch::Tensor a, torch::Tensor b);"

{name} = load_inline(
    name="{name}",
    cpp_sources={name}_cpp_source,
    cuda_sources={name}_source,
    functions=["{name}_cuda"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.op = {name}

    def forward(self, a, b):
        return self.op.{name}_cuda(a, b)
'''


def toy_pairs() -> list[dict]:
    pairs = []
    for level, (name, expr) in enumerate(OPS.items()):
        torch_expr = expr if "fmaxf" not in expr else "torch.maximum(a, b)"
        cuda_expr = expr.replace("a", "x").replace("b", "y").replace("fmxxf", "fmaxf")
        pairs.append({"reference": REFERENCE.format(torch_expr=torch_expr),
                      "solution": SOLUTION.format(name=f"elementwise_{name}", cuda_expr=cuda_expr),
                      "level": 1 + level % 2})
    return pairs


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The tiny model's matmuls are faster on one intra-op thread, far faster when the cores are busy."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def toy_jsonl(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "pairs.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in toy_pairs()))
    return path


@pytest.fixture(scope="session")
def toy_cutoff(tiny_model_dir):
    """cutoff(kind, answer_tokens): the --cutoff that keeps every toy prompt of `kind` whole and cuts answers to
    about `answer_tokens`, so runs stay short however long engine.prompts' prompts are."""
    from dice_lsp.engine.tokenizer import Tokenizer
    from dice_lsp.train.data import Pair, prompt_ids

    tokenizer = Tokenizer.from_dir(tiny_model_dir)
    longest = {kind: max(len(prompt_ids(tokenizer, Pair(p["reference"], p["solution"]), kind)) for p in toy_pairs())
               for kind in ("e2e", "infill")}
    return lambda kind, answer_tokens=32: longest[kind] + answer_tokens


CPP_REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return a {op} b


def get_inputs():
    return [torch.randn(256), torch.randn(256)]


def get_init_inputs():
    return []
'''

CPP_SOLUTION = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

add_cpp_source = """
#include <torch/extension.h>

torch::Tensor add_loop(torch::Tensor a, torch::Tensor b) {
    auto x = a.contiguous(), y = b.contiguous();
    auto out = torch::empty_like(x);
    const float* p = x.data_ptr<float>();
    const float* q = y.data_ptr<float>();
    float* r = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) r[i] = p[i] + q[i];
    return out;
}
"""

toy_add = load_inline(name="dice_train_toy_add", cpp_sources=add_cpp_source, functions=["add_loop"])


class ModelNew(nn.Module):
    def forward(self, a, b):
        return toy_add.add_loop(a, b)
'''


@dataclass(frozen=True)
class CppPair:
    """One C++-only extension (an elementwise add) that every harness-backed training test builds, so the session's
    build cache builds it once; `reference` adds (the solution is correct), `wrong_reference` subtracts."""

    reference: str = CPP_REFERENCE.format(op="+")
    wrong_reference: str = CPP_REFERENCE.format(op="-")
    solution: str = CPP_SOLUTION


@pytest.fixture(scope="session")
def cpp_pair() -> CppPair:
    return CppPair()


@pytest.fixture(scope="session")
def cli_env():
    """The environment of a `dice-lsp` subprocess: this checkout importable, one OpenMP thread per process."""
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="session")
def sft_command(tiny_model_dir, toy_jsonl, toy_cutoff):
    """sft_command(out, steps, *options, processes=1, batch_size=2): the command line of `dice-lsp train sft` on
    the toy set's end-to-end samples, under torchrun (gloo on CPU) when `processes` > 1."""

    def command(out, steps, *options, processes=1, batch_size=2):
        launcher = [sys.executable, "-m"]
        if processes > 1:
            launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                        str(processes), "-m"]
        return [*launcher, "dice_lsp", "train", "sft", "--model", str(tiny_model_dir), "--data", str(toy_jsonl),
                "--out", str(out), "--lr", "2e-3", "--batch-size", str(batch_size), "--epochs", "100",
                "--max-steps", str(steps), "--cutoff", str(toy_cutoff("e2e")), "--kinds", "e2e", "--save-every", "2",
                "--schedule", "constant", "--no-progress", *options]

    return command


def answer_loss(checkpoint, kind: str, cutoff: int, draws: int = 4) -> float:
    """The SFT objective of the checkpoint on disk over the toy set's samples of `kind`, at noise drawn from fixed
    seeds: what training on that set must lower. Loaded from disk, so it measures what a run exported."""
    from dice_lsp.engine.checkpoint import load
    from dice_lsp.train.data import Pair, sft_samples
    from dice_lsp.train.objective import Objective
    from dice_lsp.train.pack import IGNORE, join
    from dice_lsp.train.sft import fit, sft_loss, sft_piece

    loaded = load(str(checkpoint), device="cpu", dtype="float32")
    config, objective = loaded.config, Objective(loaded.model)
    pairs = [Pair(p["reference"], p["solution"]) for p in toy_pairs()]
    samples, _ = fit(sft_samples(loaded.tokenizer, config, pairs, kinds=(kind,))[0], cutoff)
    losses = []
    with torch.no_grad():
        for index, sample in enumerate(samples):
            for draw in range(draws):
                noise = torch.Generator().manual_seed(1000 * index + draw)
                piece = sft_piece(sample.prompt_ids, sample.answer_ids, config.block_size, config.mask_token_id,
                                  config.eos_token_id, noise, index)
                row = join([piece], None, config.eos_token_id)
                ce = objective(row.input_ids, row.position, objective.mask(row), row.target)
                weight = row.weight.reshape(-1)[row.target.reshape(-1) != IGNORE]
                losses.append(float(sft_loss(ce, weight, piece.answer_tokens)))
    return sum(losses) / len(losses)


@pytest.fixture(scope="session")
def toy_answer_loss():
    """`toy_answer_loss(checkpoint, kind, cutoff)`: see answer_loss."""
    return answer_loss
