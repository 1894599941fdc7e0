"""A Triton matmul for the few-row products of block decoding: y = x @ w.T with x [M <= 32, K] and w [N, K].

At batch 1 a block pass multiplies 4 or 8 rows by every weight matrix: the work is reading the weights once. cuBLAS
picks kernels made for many rows there and streamed the H200's weights well below its bandwidth; this kernel gives
each program a slice of N, pads M to 16 or 32 for the tensor cores, and pipelines its loads over K.
`linear` falls back to F.linear for anything else (many rows, training, CPU tensors, fp32).
"""

from __future__ import annotations

import contextlib
import functools
import threading

import torch
import torch.nn.functional as F

MAX_ROWS = 32
# (BLOCK_N, BLOCK_K, stages) by the output width: narrow outputs need small slices to give every SM some of N.
CONFIGS = {"narrow": (16, 512, 3), "wide": (64, 256, 4)}
_state = threading.local()  # .on: this thread's model passes use the kernel (see `active`)


@functools.lru_cache(maxsize=1)
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def skinny(x, w, y, M, N, K, sx, sw, sy, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        rows = tl.arange(0, BLOCK_M)
        cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for start in range(0, K, BLOCK_K):
            k = start + tl.arange(0, BLOCK_K)
            a = tl.load(x + rows[:, None] * sx + k[None, :], mask=(rows[:, None] < M) & (k[None, :] < K), other=0.0)
            b = tl.load(w + cols[:, None] * sw + k[None, :], mask=(cols[:, None] < N) & (k[None, :] < K), other=0.0)
            acc += tl.dot(a, tl.trans(b))
        tl.store(y + rows[:, None] * sy + cols[None, :], acc.to(y.dtype.element_ty),
                 mask=(rows[:, None] < M) & (cols[None, :] < N))

    return skinny


def available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def matmul(x: torch.Tensor, weight: torch.Tensor, config: tuple[int, int, int] | None = None) -> torch.Tensor:
    """x [..., K] @ weight[N, K].T by the Triton kernel, whatever the sizes (tests call it directly)."""
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    weight = weight if weight.stride(-1) == 1 else weight.contiguous()
    M, K = x2.shape
    N = weight.shape[0]
    block_n, block_k, stages = config or CONFIGS["narrow" if N <= 4096 else "wide"]
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    grid = (-(-N // block_n),)
    _kernel()[grid](x2, weight, y, M, N, K, x2.stride(0), weight.stride(0), y.stride(0),
                    BLOCK_M=16 if M <= 16 else 32, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=4, num_stages=stages)
    return y.view(*shape[:-1], N)


@contextlib.contextmanager
def active(on: bool = True):
    """`linear` uses the kernel inside the block on this thread (a runner's passes); F.linear elsewhere."""
    before = getattr(_state, "on", False)
    _state.on = on
    try:
        yield
    finally:
        _state.on = before


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """F.linear without bias, through the Triton kernel where it is meant to win: inside `active()`, a half-precision
    CUDA product of at most MAX_ROWS rows, gradients off."""
    if (getattr(_state, "on", False) and x.is_cuda and x.dtype in (torch.bfloat16, torch.float16)
            and weight.dtype == x.dtype and x.numel() // x.shape[-1] <= MAX_ROWS and not torch.is_grad_enabled()):
        return matmul(x, weight)
    return F.linear(x, weight)
