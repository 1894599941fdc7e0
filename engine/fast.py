"""The fast way to run blocks: a preallocated (static) KV cache and one CUDA graph per cache-length bucket.

`GraphRunner` is a drop-in runner for `decode.generate`; it computes what `CacheRunner` does (tests check it).
"""

from __future__ import annotations

import torch

from engine.model import SDARModel, block_causal_mask

BUCKET = 256  # attention reads the cache up to the next multiple of this: few graphs, little wasted reading


class StaticCache:
    """K/V of every physical position, preallocated as [B, kv_heads, capacity, head_dim] per layer.

    `update` writes the new K/V at `slots` and returns the first `length` positions: a pass over a block writes that
    block's K/V every time, and the last pass, over the final tokens, is the one that stays.
    """

    def __init__(self, model: SDARModel, batch: int, capacity: int):
        c = model.config
        weight = model.lm_head.weight
        shape = (batch, c.num_key_value_heads, capacity, c.head_dim)
        self.keys = [torch.zeros(shape, dtype=weight.dtype, device=weight.device) for _ in range(c.num_hidden_layers)]
        self.values = [torch.zeros_like(k) for k in self.keys]
        self.batch, self.capacity = batch, capacity
        self.slots = torch.zeros(0, dtype=torch.long, device=weight.device)
        self.length = 0

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        rows = k.shape[0]  # 1 for a prefill shared by identical prompts: written to every row
        self.keys[layer].index_copy_(2, self.slots, k.expand(self.batch, -1, -1, -1))
        self.values[layer].index_copy_(2, self.slots, v.expand(self.batch, -1, -1, -1))
        return self.keys[layer][:rows, :, : self.length], self.values[layer][:rows, :, : self.length]


class GraphRunner:
    """Runs blocks with a StaticCache, replaying a captured CUDA graph per (pass kind, cache bucket) on a GPU and
    plain eager calls on a CPU. Keep one per model: graphs and cache are reused while batch and length fit."""

    def __init__(self, model: SDARModel, graphs: bool | None = None):
        self.model = model
        self.device = model.lm_head.weight.device
        self.use_graphs = self.device.type == "cuda" if graphs is None else graphs
        self.cache: StaticCache | None = None
        self.graphs: dict[tuple[bool, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.pool = None
        self.captures = 0  # graphs captured so far (for benchmarks)

    @torch.inference_mode()
    def prefill(self, tokens, positions, valid, block_size):
        B, total = valid.shape
        capacity = -(-total // BUCKET) * BUCKET
        if self.cache is None or self.cache.batch != B or self.cache.capacity < capacity or self.block_size != block_size:
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

    def denoise(self, block, positions, start):
        return self._pass(block, positions, start, logits=True)

    def commit(self, block, positions, start):
        self._pass(block, positions, start, logits=False)

    def _allocate(self, batch, capacity, block_size):
        self.graphs.clear()
        self.cache = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        self.cache = StaticCache(self.model, batch, capacity)
        self.block_size = block_size
        self.tokens = torch.zeros((batch, block_size), dtype=torch.long, device=self.device)
        self.positions = torch.zeros((batch, block_size), dtype=torch.long, device=self.device)
        self.slots = torch.zeros(block_size, dtype=torch.long, device=self.device)
        self.mask = torch.zeros((batch, 1, block_size, capacity), dtype=torch.bool, device=self.device)
        self.pool = torch.cuda.graph_pool_handle() if self.use_graphs else None

    @torch.inference_mode()
    def _pass(self, block, positions, start, logits):
        bs = block.shape[1]
        end = start + bs
        bucket = min(-(-end // BUCKET) * BUCKET, self.cache.capacity)
        self.tokens.copy_(block)
        self.positions.copy_(positions)
        torch.arange(start, end, out=self.slots)
        # The block sees every valid key before its end: earlier blocks (final K/V) and itself (bidirectional).
        self.mask.copy_((self.valid & (torch.arange(self.cache.capacity, device=self.device) < end))[:, None, None, :]
                        .expand_as(self.mask))
        if not self.use_graphs:
            return self._forward(bucket, logits)
        key = (logits, bucket)
        if key not in self.graphs:
            self.graphs[key] = self._capture(bucket, logits)
        graph, out = self.graphs[key]
        graph.replay()
        return out

    def _forward(self, bucket, logits):
        self.cache.slots, self.cache.length = self.slots, bucket
        hidden = self.model.hidden(self.tokens, self.positions, self.mask[..., :bucket], self.cache)
        return self.model.lm_head(hidden) if logits else hidden

    def _capture(self, bucket, logits):
        # Warm up on a side stream (allocator and cuBLAS settle), then record. Both write this block's K/V, which
        # the pass itself does anyway, so capturing changes nothing the decoder can see.
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            self._forward(bucket, logits)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = self._forward(bucket, logits)
        self.captures += 1
        return graph, out
