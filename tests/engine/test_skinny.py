"""engine.skinny: the Triton few-row matmul equals F.linear, and is taken only where it is meant to run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from engine import skinny

ROOT = Path(__file__).resolve().parents[2]


def test_kernel_equals_torch_in_triton_interpreter():
    """Triton's CPU interpreter runs the very kernel (fp32 and fp16: the interpreter's bf16 dot is not numeric),
    on sizes that are not multiples of any tile, in a child process: the interpreter is chosen at import."""
    pytest.importorskip("triton")
    script = textwrap.dedent("""
        import torch
        from engine import skinny
        torch.manual_seed(0)
        for dtype, tol in ((torch.float32, 1e-4), (torch.float16, 2e-2)):
            for rows, n, k, config in ((1, 40, 96, (16, 32, 2)), (3, 70, 200, (16, 64, 2)), (20, 33, 64, (32, 32, 2)),
                                       (8, 96, 256, None), (32, 17, 48, (16, 16, 1))):
                x, w = torch.randn(rows, k, dtype=dtype), torch.randn(n, k, dtype=dtype)
                y = skinny.matmul(x[None], w, config)
                assert y.shape == (1, rows, n) and y.dtype == dtype, (y.shape, y.dtype)
                torch.testing.assert_close(y[0].float(), x.float() @ w.float().T, atol=tol * k ** 0.5, rtol=tol)
        print("ok")
    """)
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_linear_takes_the_kernel_only_inside_active(monkeypatch):
    calls = []
    monkeypatch.setattr(skinny, "matmul", lambda x, w, config=None: calls.append(x.shape) or F.linear(x, w))
    x, w = torch.randn(2, 4, 8), torch.randn(6, 8)
    torch.testing.assert_close(skinny.linear(x, w), F.linear(x, w))
    with skinny.active():
        torch.testing.assert_close(skinny.linear(x, w), F.linear(x, w))  # CPU tensors: F.linear
    assert calls == []
    if torch.cuda.is_available():
        xc, wc = x.cuda().half(), w.cuda().half()
        with torch.inference_mode(), skinny.active():
            skinny.linear(xc, wc)  # 8 rows, half precision, no grad: the kernel
            skinny.linear(torch.randn(40, 8, device="cuda", dtype=torch.half), wc)  # 40 rows: cuBLAS
            with skinny.active(False):
                skinny.linear(xc, wc)
        assert calls == [(2, 4, 8)]


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 4, 8, 32])
def test_bf16_kernel_matches_cublas_on_dice_shapes(rows):
    torch.manual_seed(0)
    for n, k in ((4096, 2048), (2048, 2048), (12288, 2048), (2048, 6144), (151936, 2048), (100, 72)):
        x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        with torch.inference_mode():
            torch.testing.assert_close(skinny.matmul(x, w).float(), F.linear(x, w).float(), atol=2e-2, rtol=2e-2)
