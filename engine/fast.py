"""The fast way to run blocks: a preallocated (static) KV cache and one CUDA graph per cache-length bucket, with
the block passes' own kernels (torch.compile'd norms, engine.attention, engine.fused) in the graphs.

`GraphRunner` is a drop-in runner for `decode.generate`; it computes what `CacheRunner` does (tests check it). Its
kernels are its own, carried to the model by its cache: other runners and training keep the eager ones.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
import warnings

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from dice_lsp.engine import attention as block_attention_kernels
from dice_lsp.engine import fused as fused_kernels
from dice_lsp.engine import model as model_code
from dice_lsp.engine.decode import Runner, visible_keys
from dice_lsp.engine.model import EAGER, Kernels, SDARModel, block_causal_mask

BUCKET = 256  # attention reads the cache up to the next multiple of this: few graphs, little wasted reading


@functools.cache
def compile_kernels() -> Kernels | None:
    """The eager Kernels with the layers' elementwise pieces torch.compile'd, compiled now; once per process, and
    used only by the runners that ask for them.

    A GPU replaying a CUDA graph is then bound by the weights it reads, not by hundreds of tiny kernels. None (with a
    warning) when there is no GPU or compilation fails: the caller runs the eager kernels, slower but the same.
    """
    if not torch.cuda.is_available():
        return None
    try:
        fused = {name: torch.compile(getattr(model_code, name), dynamic=True, fullgraph=True)
                 for name in ("rms_norm", "qk_norm_rotary", "swiglu")}
        for dtype in (torch.bfloat16, torch.float32):  # compile here rather than inside a graph capture
            x = torch.randn(2, 3, 4, 8, device="cuda", dtype=dtype)
            w = torch.ones(8, device="cuda", dtype=dtype)
            fused["rms_norm"](x, w, 1e-6)
            fused["qk_norm_rotary"](x, x, w, w, x[:, :, 0], x[:, :, 1], 1e-6)
            fused["swiglu"](x, x)
    except Exception as error:  # no Triton, no compiler: run eager, slower but the same
        warnings.warn(f"torch.compile of the engine's kernels failed, running them eager: {error}")
        return None
    return dataclasses.replace(EAGER, **fused)


def fuse_projections(model: SDARModel) -> None:
    """Put each layer's q/k/v weights, and its gate/up weights, into one tensor, the parameters becoming views of it
    (no extra memory). Inference then runs one wide matmul instead of several narrow ones, which a GPU streams
    much closer to its bandwidth at small batch. Training (grad enabled) still uses the separate parameters."""
    with torch.inference_mode(False):  # parameters cannot be made of inference tensors, whoever calls this
        _fuse(model)


def _fuse(model: SDARModel) -> None:
    for layer in model.model.layers:
        for owner, names, attribute in ((layer.self_attn, ("q_proj", "k_proj", "v_proj"), "qkv_weight"),
                                        (layer.mlp, ("gate_proj", "up_proj"), "gate_up_weight")):
            if getattr(owner, attribute) is not None:
                continue
            linears = [getattr(owner, name) for name in names]
            fused = torch.cat([linear.weight.detach() for linear in linears])
            for linear, part in zip(linears, fused.split([linear.out_features for linear in linears])):
                linear.weight = torch.nn.Parameter(part, requires_grad=linear.weight.requires_grad)
            setattr(owner, attribute, fused)


class StaticCache:
    """K/V of every physical position, preallocated as [B, kv_heads, capacity, head_dim] per layer.

    `update` writes the new K/V at `slots` and returns the first `length` positions: a pass over a block writes that
    block's K/V every time, and the last pass, over the final tokens, is the one that stays. `rotate_and_update`
    also does the QK-norm and RoPE before, in one kernel (engine.fused) where it can.
    """

    def __init__(self, model: SDARModel, batch: int, capacity: int, fused: bool = True, kernels: Kernels = EAGER):
        c = model.config
        weight = model.lm_head.weight
        shape = (batch, c.num_key_value_heads, capacity, c.head_dim)
        self.keys = [torch.zeros(shape, dtype=weight.dtype, device=weight.device) for _ in range(c.num_hidden_layers)]
        self.values = [torch.zeros_like(k) for k in self.keys]
        self.batch, self.capacity = batch, capacity
        self.slots = torch.zeros(0, dtype=torch.long, device=weight.device)
        self.length = 0
        self.fused = fused
        self.kernels = kernels  # the passes on this cache run these: its runner's (engine.model.kernels_of)

    def rotate_and_update(self, layer: int, q, k, v, q_weight, k_weight, cos, sin, eps: float):
        if not (self.fused and q.shape[0] == self.batch and fused_kernels.usable(q)):
            return model_code.rotate_and_update(self, layer, q, k, v, q_weight, k_weight, cos, sin, eps)
        keys, values = self.keys[layer], self.values[layer]
        q = fused_kernels.rotate_and_store(q, k, v, q_weight, k_weight, cos, sin, eps, keys, values, self.slots)
        return q, keys[:, :, : self.length], values[:, :, : self.length]

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        rows = k.shape[0]  # 1 for a prefill shared by identical prompts: written to every row
        self.keys[layer].index_copy_(2, self.slots, k.expand(self.batch, -1, -1, -1))
        self.values[layer].index_copy_(2, self.slots, v.expand(self.batch, -1, -1, -1))
        return self.keys[layer][:rows, :, : self.length], self.values[layer][:rows, :, : self.length]


class GraphRunner(Runner):
    """Runs blocks with a StaticCache and its own kernels, replaying a captured CUDA graph per (pass kind, cache
    bucket) on a GPU and plain eager calls on a CPU. Keep one per model: graphs and cache are reused while batch and
    length fit."""

    def __init__(self, model: SDARModel, graphs: bool | None = None, compile: bool | None = None,
                 fuse: bool | None = None, attention: str = "triton", fused_inputs: bool = True,
                 fused_writes: bool = True):
        """None: each choice on where it helps (a GPU).

        attention, for block passes: "triton" (engine.attention: split over the cache, so a few queries still fill
        the GPU), "efficient" (SDPA's memory-efficient backend) or "default" (PyTorch's pick). fused_inputs: QK-norm,
        RoPE and the K/V writes in one kernel (engine.fused) rather than PyTorch's five. fused_writes: as
        decode.Runner's."""
        super().__init__(fused_writes)
        self.model = model
        self.device = model.lm_head.weight.device
        on_gpu = self.device.type == "cuda"
        self.use_graphs = on_gpu if graphs is None else graphs
        if attention not in ("triton", "efficient", "default"):
            raise ValueError(f"unknown attention {attention!r}: use triton, efficient or default")
        self.compile_seconds = None
        kernels = EAGER
        if on_gpu if compile is None else compile:
            began = time.perf_counter()
            compiled = compile_kernels()
            if compiled is not None:
                kernels, self.compile_seconds = compiled, time.perf_counter() - began
        if attention == "triton":
            kernels = dataclasses.replace(kernels, attention=block_attention_kernels.block_attention)
        self.kernels = kernels  # this runner's passes only: its cache carries them to the model (set before a pass)
        if on_gpu if fuse is None else fuse:
            fuse_projections(model)
        self.attention, self.fused_inputs = attention, fused_inputs
        self.cache: StaticCache | None = None
        self.graphs: dict[tuple[bool, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.pool = None
        self.captures = 0  # graphs captured so far (for benchmarks)

    @torch.inference_mode()
    def _prefill(self, tokens, positions, valid, block_size):
        B, total = valid.shape
        capacity = -(-total // BUCKET) * BUCKET
        cache = self.cache
        if cache is None or cache.batch != B or cache.capacity < capacity or self.block_size != block_size:
            self._allocate(B, capacity, block_size)
        self.valid = torch.zeros((B, self.cache.capacity), dtype=torch.bool, device=self.device)
        self.valid[:, :total] = valid
        n = tokens.shape[1]
        if n == 0:
            return
        index = torch.arange(n, device=self.device)
        shared = bool((tokens == tokens[:1]).all() and (valid[:, :n] == valid[:1, :n]).all())
        rows = slice(0, 1) if shared else slice(None)  # N samples of one prompt: prefill it once
        mask = block_causal_mask(index, index, block_size) & valid[rows, None, None, :n]
        mask |= torch.eye(n, dtype=torch.bool, device=self.device)
        self.cache.slots, self.cache.length = index, n
        self.model.hidden(tokens[rows], positions[rows], mask, self.cache)

    def _denoise(self, block, positions, start):
        return self._pass(block, positions, start, logits=True)

    def _commit(self, block, positions, start):
        self._pass(block, positions, start, logits=False)

    def _commit_and_denoise(self, done, done_positions, block, positions, start):
        return self._pass(block, positions, start, logits=True, done=(done, done_positions))

    def _allocate(self, batch, capacity, block_size):
        self.graphs.clear()
        self.cache = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        self.cache = StaticCache(self.model, batch, capacity, self.fused_inputs, self.kernels)
        self.block_size = block_size
        # Room for two blocks: a pass over a finished block (rows :block_size) and the next one runs both at once;
        # a pass over one block uses the first half. Graphs replay on these buffers.
        self.tokens = torch.zeros((batch, 2 * block_size), dtype=torch.long, device=self.device)
        self.positions = torch.zeros((batch, 2 * block_size), dtype=torch.long, device=self.device)
        self.slots = torch.zeros(2 * block_size, dtype=torch.long, device=self.device)
        self.mask = torch.zeros((batch, 1, 2 * block_size, capacity), dtype=torch.bool, device=self.device)
        self.pool = torch.cuda.graph_pool_handle() if self.use_graphs else None

    @torch.inference_mode()
    def _pass(self, block, positions, start, logits, done=None):
        bs = block.shape[1]
        n = 0 if done is None else done[0].shape[1]
        first, end = start - n, start + bs
        bucket = min(-(-end // BUCKET) * BUCKET, self.cache.capacity)
        rows = n + bs
        if done is None:
            self.tokens[:, :rows].copy_(block)
            self.positions[:, :rows].copy_(positions)
        else:
            torch.cat((done[0], block), 1, out=self.tokens[:, :rows])
            torch.cat((done[1], positions), 1, out=self.positions[:, :rows])
        torch.arange(first, end, out=self.slots[:rows])
        # Each row sees every valid key before its block's end: earlier blocks (final K/V) and its own block
        # (bidirectional); a finished block's rows do not see the block after it.
        torch.logical_and(self.valid[:, None, None, :], visible_keys(n, start, bs, self.cache.capacity, self.device),
                          out=self.mask[:, :, :rows])
        if not self.use_graphs:
            return self._forward(bucket, logits, n, rows)
        key = (logits, n, bucket)
        if key not in self.graphs:
            self.graphs[key] = self._capture(bucket, logits, n, rows)
        graph, out = self.graphs[key]
        graph.replay()
        return out

    def _forward(self, bucket, logits, done, rows):
        self.cache.slots, self.cache.length = self.slots[:rows], bucket
        args = (self.tokens[:, :rows], self.positions[:, :rows], self.mask[:, :, :rows, :bucket], self.cache)
        backends = contextlib.nullcontext()
        if self.attention == "efficient" and self.device.type == "cuda":
            backends = sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])
        with backends:
            hidden = self.model.hidden(*args)
            return self.model.logits(hidden[:, done:]) if logits else hidden

    def _capture(self, bucket, logits, done, rows):
        # Warm up on a side stream (allocator and cuBLAS settle), then record. Both write this pass's K/V, which
        # the pass itself does anyway, so capturing changes nothing the decoder can see.
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            self._forward(bucket, logits, done, rows)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = self._forward(bucket, logits, done, rows)
        self.captures += 1
        return graph, out
