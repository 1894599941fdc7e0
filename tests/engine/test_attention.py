"""The Triton block attention equals the model's SDPA call and head merge; without its conditions it is that call.

On CPU the kernels run in Triton's interpreter, in a child process (the interpreter is chosen at import).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from dice_lsp.engine import attention

ROOT = Path(__file__).resolve().parents[2]
BLOCK = 4  # the diffusion block: a pass over 8 positions covers a finished block and the next one



def case(B, L, N, D, starts, **extra) -> dict:
    return {"B": B, "L": L, "N": N, "D": D, "starts": starts, **extra}


# Kernel cases for the interpreter (kept small: it runs each program in numpy). `starts` is, per batch row, the
# position of the pass's first query; keys from start + L on are the unwritten rest of the cache bucket.
INTERPRETER_CASES = {
    "M=8 N=256 D=16": case(1, 4, 256, 16, [100]),
    "M=16 N=256 D=16, batch rows with their own masks": case(2, 8, 256, 16, [96, 200]),
    "M=16 N=256 D=128, one split": case(1, 8, 256, 128, [120], splits=1),
    "M=16 N=512 D=128, three splits": case(1, 8, 512, 128, [300], splits=3),
    "M=8 N=256 D=16, fp16": case(1, 4, 256, 16, [60], dtype="float16"),
    "one mask for the batch, a strided view": case(2, 4, 256, 16, [40], shared_mask=True),
    "a row with every key masked gives zeros": case(1, 4, 256, 16, [80], dead_row=3, splits=2),
    "... also when one split writes the output": case(1, 4, 256, 16, [80], dead_row=6, splits=1),
}
TOLERANCE = {"float32": 2e-6, "float16": 2e-3, "bfloat16": 2e-2}


def sdpa_lines(q, k, v, mask, scale, L):
    """The model's code, verbatim: what `block_attention` replaces."""
    B, Hkv, M, D = q.shape
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return y.reshape(B, Hkv * (M // L), L, D).transpose(1, 2).reshape(B, L, Hkv * (M // L) * D)


def engine_mask(starts, group, L, N, dtype, device="cpu"):
    """The folded additive mask of a pass: block-causal, keys past the pass's last position masked, [B, 1, G*L, N]."""
    rows = []
    for start in starts:
        queries = start + torch.arange(L, device=device)
        keys = torch.arange(N, device=device)
        visible = (keys[None] // BLOCK <= queries[:, None] // BLOCK) & (keys[None] < start + L)
        rows.append(visible)
    visible = torch.stack(rows)[:, None].repeat(1, 1, group, 1)
    return torch.zeros(visible.shape, dtype=dtype, device=device).masked_fill_(~visible, float("-inf"))


def case_inputs(B, L, N, D, starts, dtype=torch.float32, kv_heads=2, group=2, device="cpu", shared_mask=False):
    """q, k, v as the model passes them (k, v a slice of a longer static cache), the mask and the scale."""
    q = torch.randn(B, kv_heads, group * L, D, dtype=dtype, device=device)
    cache = torch.randn(2, B, kv_heads, N + 256, D, dtype=dtype, device=device)
    k, v = cache[0, :, :, :N], cache[1, :, :, :N]
    if shared_mask:  # one row for the whole batch, cut from a wider buffer
        wide = engine_mask(starts, group, L, N + 64, dtype, device)
        mask = wide[..., :N]
    else:
        mask = engine_mask(starts * B if len(starts) == 1 else starts, group, L, N, dtype, device)
    return q, k, v, mask, D**-0.5


def run_interpreter_cases() -> dict:
    """In the interpreter's process: each case through the kernel, with its error against SDPA in float64."""
    assert attention.INTERPRET, "run with TRITON_INTERPRET=1"
    results = {}
    reference = attention.reference_attention

    def forbidden(*args):
        raise AssertionError("fell back to SDPA")

    for name, case in INTERPRETER_CASES.items():
        torch.manual_seed(len(results))
        case = dict(case)
        splits, dead_row = case.pop("splits", None), case.pop("dead_row", None)
        dtype = case.pop("dtype", "float32")
        q, k, v, mask, scale = case_inputs(**case, dtype=getattr(torch, dtype))
        L = case["L"]
        if dead_row is not None:
            mask[:, :, dead_row] = float("-inf")
        assert attention.supported(q, k, v, mask, L), name
        attention.reference_attention = forbidden  # the kernel must run, not the fallback
        try:
            y = attention.block_attention(q, k, v, mask, scale, L) if splits is None else \
                attention.split_attention(q, k, v, mask, scale, L, splits=splits)
        finally:
            attention.reference_attention = reference
        expected = sdpa_lines(q.double(), k.double(), v.double(), mask.double(), scale, L)
        dead = torch.zeros(y.shape, dtype=torch.bool)
        if dead_row is not None:  # folded row g*L + l is query head kv*G + g at position l
            group, D = q.shape[2] // L, q.shape[3]
            for kv in range(q.shape[1]):
                head = kv * group + dead_row // L
                dead[:, dead_row % L, head * D:(head + 1) * D] = True
            expected = expected.nan_to_num(0.0)  # SDPA's NaN (or, in recent versions, zeros) there
        results[name] = {
            "error": (y.double() - expected).abs().max().item(), "tolerance": TOLERANCE[dtype],
            "shape": list(y.shape), "expected_shape": list(expected.shape), "dtype": str(y.dtype),
            "dead_entries": int(dead.sum()), "dead_zero": bool((y[dead] == 0).all()),
        }
    results["fallback"] = fallback_rules()
    return results


def fallback_rules() -> dict:
    """Inputs outside the kernel's conditions take the SDPA lines, even where the kernel could run."""
    torch.manual_seed(0)
    q, k, v, mask, scale = case_inputs(1, 4, 256, 16, [40])
    variants = {
        "no mask": (q, k, v, None, 4),
        "bool mask": (q, k, v, mask == 0, 4),
        "head dim 24": (torch.randn(1, 2, 8, 24), torch.randn(1, 2, 256, 24), torch.randn(1, 2, 256, 24), mask, 4),
        "80 query rows": (q.repeat(1, 1, 10, 1), k, v, mask.repeat(1, 1, 10, 1), 8),
        "needs grad": (q.clone().requires_grad_(), k, v, mask, 4),
    }
    outcome = {}
    for name, (q_, k_, v_, mask_, L) in variants.items():
        y = attention.block_attention(q_, k_, v_, mask_, scale, L)
        outcome[name] = not attention.supported(q_, k_, v_, mask_, L) and torch.equal(
            y, sdpa_lines(q_, k_, v_, mask_, scale, L))
    return outcome


@pytest.fixture(scope="module")
def interpreted():
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": path}
    done = subprocess.run([sys.executable, __file__], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", INTERPRETER_CASES)
def test_kernel_matches_sdpa_in_interpreter(interpreted, name):
    result = interpreted[name]
    assert result["shape"] == result["expected_shape"]
    assert result["error"] <= result["tolerance"], result
    assert result["dead_zero"], result
    if INTERPRETER_CASES[name].get("dead_row") is not None:
        assert result["dead_entries"] == 2 * 16  # one query head per KV head (of 2), at one position, D=16


def test_fallback_rules_in_interpreter(interpreted):
    assert interpreted["fallback"] == dict.fromkeys(interpreted["fallback"], True) and interpreted["fallback"]


@pytest.mark.skipif(attention.INTERPRET, reason="the interpreter runs the kernel on CPU")
def test_cpu_is_exactly_sdpa():
    torch.manual_seed(0)
    q, k, v, mask, scale = case_inputs(2, 8, 256, 16, [40, 100])
    assert not attention.supported(q, k, v, mask, 8)
    assert torch.equal(attention.block_attention(q, k, v, mask, scale, 8), sdpa_lines(q, k, v, mask, scale, 8))


def test_imports_and_falls_back_without_triton(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # `import triton` raises ImportError
    monkeypatch.setitem(sys.modules, "triton.language", None)
    spec = importlib.util.spec_from_file_location("attention_without_triton", ROOT / "engine" / "attention.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    q, k, v, mask, scale = case_inputs(1, 4, 256, 16, [0])
    assert module.triton is None and not module.supported(q, k, v, mask, 4)
    assert torch.equal(module.block_attention(q, k, v, mask, scale, 4), sdpa_lines(q, k, v, mask, scale, 4))


@pytest.mark.parametrize("batch_heads", [8, 16, 64, 512])
@pytest.mark.parametrize("keys", [64, 256, 1000, 2048, 8192])
def test_splits_cover_the_keys_in_whole_tiles(batch_heads, keys):
    splits, chunk = attention.split_count(batch_heads, keys, 64)
    assert chunk % 64 == 0 and (splits - 1) * chunk < keys <= splits * chunk
    assert splits == 1 or chunk >= attention.MIN_SPLIT_KEYS
    if keys >= 8192:  # long caches fill the GPU even at batch 1
        assert batch_heads * splits >= 128


# GPU: the engine's shapes (8 KV heads of 2 query heads each, head dim 128) against SDPA itself.

def gpu_case(B, L, N, dtype, D=128):
    # Each batch row at its own place: the first ends at the bucket's end, the others anywhere before it.
    starts = [(N - L - i * 37 * BLOCK % (N - L)) // BLOCK * BLOCK for i in range(B)]
    return case_inputs(B, L, N, D, starts, dtype=dtype, kv_heads=8, group=2, device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("B", [1, 64])
@pytest.mark.parametrize("N", [256, 2048])
@pytest.mark.parametrize("L", [4, 8])
def test_gpu_matches_sdpa(dtype, B, N, L):
    torch.manual_seed(0)
    q, k, v, mask, scale = gpu_case(B, L, N, dtype)
    assert attention.supported(q, k, v, mask, L)
    with torch.inference_mode():
        y = attention.block_attention(q, k, v, mask, scale, L)
        sdpa = sdpa_lines(q, k, v, mask, scale, L)
        exact = sdpa_lines(q.double(), k.double(), v.double(), mask.double(), scale, L)
    assert y.shape == sdpa.shape and y.dtype == dtype
    if dtype == torch.float32:  # greedy decoding in fp32 is compared token for token against SDPA
        torch.testing.assert_close(y.double(), exact, atol=1e-6, rtol=1e-5)
    else:  # no further from the exact result than SDPA's own rounding allows
        sdpa_error = (sdpa.double() - exact).abs().max().item()
        assert (y.double() - exact).abs().max().item() <= 2 * sdpa_error + 1e-3


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("D", [16, 64, 256])
def test_gpu_other_head_dims(dtype, D):
    torch.manual_seed(0)
    q, k, v, mask, scale = gpu_case(2, 8, 1024, dtype, D=D)
    y = attention.block_attention(q, k, v, mask, scale, 8)
    exact = sdpa_lines(q.double(), k.double(), v.double(), mask.double(), scale, 8)
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(y.double(), exact, atol=tolerance, rtol=tolerance)


@pytest.mark.gpu
def test_gpu_falls_back_when_grad_is_needed():
    q, k, v, mask, scale = gpu_case(1, 4, 256, torch.float32)
    q.requires_grad_()
    assert not attention.supported(q, k, v, mask, 4)
    y = attention.block_attention(q, k, v, mask, scale, 4)
    y.sum().backward()
    assert q.grad is not None


@pytest.mark.gpu
@pytest.mark.parametrize("B", [1, 64])  # several splits and a combine pass; one split writing the output itself
def test_gpu_cuda_graph_replays_with_new_inputs(B):
    torch.manual_seed(0)
    N, L = 2048, 8
    q, k, v, mask, scale = gpu_case(B, L, N, torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.inference_mode():
        attention.block_attention(q, k, v, mask, scale, L)  # compiles the kernels outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.inference_mode():
        y = attention.block_attention(q, k, v, mask, scale, L)
    for step in range(2):
        q2, k2, v2, mask2, _ = case_inputs(B, L, N, 128, [BLOCK * (10 + 37 * step + i) for i in range(B)],
                                           dtype=torch.bfloat16, kv_heads=8, device="cuda")
        for old, new in ((q, q2), (k, k2), (v, v2), (mask, mask2)):
            old.copy_(new)  # in place: the graph reads these addresses
        graph.replay()
        torch.cuda.synchronize()
        expected = sdpa_lines(q.double(), k.double(), v.double(), mask.double(), scale, L)
        torch.testing.assert_close(y.double(), expected, atol=2e-2, rtol=2e-2)


if __name__ == "__main__":  # the child process of `interpreted`
    print(json.dumps(run_interpreter_cases()))
