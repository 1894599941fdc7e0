"""The fused QK-norm + RoPE + K/V-write kernel (engine.fused) computes what the PyTorch path does.

Without a GPU the kernel runs under Triton's interpreter, which must be on before Triton compiles anything: those
checks run in a child process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dice_lsp.engine import fused, model

ROOT = Path(__file__).resolve().parents[2]

KERNEL_CHECKS = r"""
import torch
from dice_lsp.engine import fused, model

assert fused.usable(torch.zeros(1, 1, 1, 16)), "the interpreter should make the kernel usable on the CPU"
torch.manual_seed(0)
for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
    B, L, H, KV, D, capacity, start = 2, 4, 4, 2, 16, 32, 8
    qkv = torch.randn(B, L, (H + 2 * KV) * D, dtype=dtype)
    q, k, v = (t.view(B, L, -1, D) for t in qkv.split([H * D, KV * D, KV * D], -1))  # strided views, as decoding
    q_weight, k_weight = torch.rand(D, dtype=dtype) + 0.5, torch.rand(D, dtype=dtype) + 0.5
    positions = torch.tensor([[8, 9, 10, 11], [20, 21, 22, 23]])  # rows of a batch at different positions
    cos, sin = model.rotary(positions, D, 10000.0, dtype)
    keys, values = torch.zeros(B, KV, capacity, D, dtype=dtype), torch.zeros(B, KV, capacity, D, dtype=dtype)
    slots = torch.arange(start, start + L)
    out = fused.rotate_and_store(q, k, v, q_weight, k_weight, cos, sin, 1e-6, keys, values, slots)
    want_q, want_k = model.qk_norm_rotary(q, k, q_weight, k_weight, cos, sin, 1e-6)
    torch.testing.assert_close(out, want_q.transpose(1, 2), atol=tol, rtol=tol)
    torch.testing.assert_close(keys[:, :, start:start + L], want_k.transpose(1, 2), atol=tol, rtol=tol)
    assert torch.equal(values[:, :, start:start + L], v.transpose(1, 2))
    others = torch.ones(capacity, dtype=torch.bool)
    others[start:start + L] = False
    assert not keys[:, :, others].any() and not values[:, :, others].any(), "wrote outside its slots"
print("kernel ok")
"""

PASS_CHECKS = r"""
import torch
from dice_lsp.engine import fused
from dice_lsp.engine.checkpoint import load
from dice_lsp.engine.decode import CacheRunner
from dice_lsp.engine.fast import GraphRunner

calls = []
kernel = fused.rotate_and_store
fused.rotate_and_store = lambda *a: calls.append(1) or kernel(*a)
loaded = load(MODEL, device="cpu")
ids = loaded.tokenizer.encode("<|im_start|>user\nfuse a softmax into one kernel<|im_end|>\n")[:12]
tokens = torch.tensor([ids, ids[::-1]])
tokens[:, 8:] = loaded.config.mask_token_id
positions = torch.arange(12)[None].expand(2, -1)
valid = torch.ones(2, 12, dtype=torch.bool)
with torch.inference_mode():
    out = []
    for runner in (CacheRunner(loaded.model), GraphRunner(loaded.model)):
        runner.prefill(tokens[:, :4], positions[:, :4], valid, 4)  # block 4:8 finished, 8:12 next
        both = runner.commit_and_denoise(tokens[:, 4:8], positions[:, 4:8], tokens[:, 8:], positions[:, 8:], 8)
        out.append((both.clone(), runner.denoise(tokens[:, 8:], positions[:, 8:], 8).clone()))
assert calls, "the decode passes did not take the fused kernel"
for a, b in zip(*out):
    torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-4)
print("passes ok")
"""


def interpreted(code: str) -> str:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_kernel_equals_pytorch_norm_rotary_and_cache_write_under_the_interpreter():
    pytest.importorskip("triton")
    assert "kernel ok" in interpreted(KERNEL_CHECKS)


def test_graph_runner_passes_with_the_kernel_equal_the_reference_runner(tiny_model_dir):
    pytest.importorskip("triton")
    assert "passes ok" in interpreted(f"MODEL = {str(tiny_model_dir)!r}\n" + PASS_CHECKS)


def test_the_pytorch_path_runs_where_the_kernel_cannot():
    with torch.no_grad():
        assert not fused.usable(torch.zeros(1, 1, 1, 16)) or os.environ.get("TRITON_INTERPRET") == "1"
        assert not fused.usable(torch.zeros(1, 1, 1, 24, device="meta"))  # head_dim not a power of two


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_kernel_equals_pytorch_on_the_gpu_at_dice_shape(dtype):
    torch.manual_seed(0)
    B, L, H, KV, D, capacity = 3, 8, 16, 8, 128, 512
    with torch.device("cuda"):
        qkv = torch.randn(B, L, (H + 2 * KV) * D, dtype=dtype)
        q, k, v = (t.view(B, L, -1, D) for t in qkv.split([H * D, KV * D, KV * D], -1))
        q_weight, k_weight = torch.rand(D, dtype=dtype) + 0.5, torch.rand(D, dtype=dtype) + 0.5
        cos, sin = model.rotary(torch.arange(300, 300 + L)[None].expand(B, -1), D, 1e6, dtype)
        keys, values = torch.zeros(B, KV, capacity, D, dtype=dtype), torch.zeros(B, KV, capacity, D, dtype=dtype)
        slots = torch.arange(300, 300 + L)
    with torch.inference_mode():
        out = fused.rotate_and_store(q, k, v, q_weight, k_weight, cos, sin, 1e-6, keys, values, slots)
        want_q, want_k = model.qk_norm_rotary(q, k, q_weight, k_weight, cos, sin, 1e-6)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out, want_q.transpose(1, 2), atol=tol, rtol=tol)
    torch.testing.assert_close(keys[:, :, 300:300 + L], want_k.transpose(1, 2), atol=tol, rtol=tol)
    assert torch.equal(values[:, :, 300:300 + L], v.transpose(1, 2))
