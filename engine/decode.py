"""Block-diffusion decoding as SDAR does it, in one function (`generate`) to check against the paper; a plain causal
LM (config.causal) goes to `generate_causal` beside it: block size 1, one step, shifted logits.

How a block's tokens run through the model, and whether a finished block's K/V is written by a pass of its own or
by the next block's first pass, is a runner's job: `CacheRunner` here, `fast.GraphRunner` beside it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, fields
from typing import Callable

import torch

from dice_lsp.engine.config import ModelConfig
from dice_lsp.engine.errors import EngineError
from dice_lsp.engine.generation import DecodeProgress, Generation
from dice_lsp.engine.model import KVCache, SDARModel, block_causal_mask
from dice_lsp.engine.settings import DecodeSettings


FUSED_PASS_ROWS = 64  # the most rows (batch x two blocks) a pass writing one block and denoising the next may have


def resolve(settings, config: ModelConfig, **overrides) -> DecodeSettings:
    """DecodeSettings from any object with some of its fields (e.g. dice_lsp.settings.Decoding) and overrides;
    block_size None means the checkpoint's, stop_token_ids None means the checkpoint's."""
    values = {f.name: getattr(settings, f.name) for f in fields(DecodeSettings) if hasattr(settings, f.name)}
    values.update(overrides)
    if values.get("block_size") is None:
        values["block_size"] = config.block_size
    if values.get("stop_token_ids") is None:
        values["stop_token_ids"] = config.stop_token_ids
    values["stop_token_ids"] = tuple(int(i) for i in values["stop_token_ids"])
    s = DecodeSettings(**values)
    problems = []
    if config.causal and s.block_size != 1:
        problems.append(f"this checkpoint is a causal LM, which decodes one token at a time: block_size must be 1 "
                        f"(or unset), not {s.block_size}")
    if s.strategy not in ("static", "dynamic"):
        problems.append(f"strategy must be static or dynamic, not {s.strategy!r}")
    if s.confidence not in ("sampled", "model"):
        problems.append(f"confidence must be sampled or model, not {s.confidence!r}")
    if s.block_size < 1 or s.steps < 1 or s.max_new_tokens < 1:
        problems.append("block_size, steps and max_new_tokens must be >= 1")
    if s.temperature < 0 or s.top_k < 0 or not 0 < s.top_p <= 1:
        problems.append("temperature and top_k must be >= 0 and top_p in (0, 1]")
    if problems:
        raise EngineError("bad decoding settings: " + "; ".join(problems))
    return s


def transfer_schedule(masked: int, steps: int) -> list[int]:
    """How many tokens static decoding commits at each pass: `masked` spread evenly, the remainder first."""
    return [masked // steps + (1 if i < masked % steps else 0) for i in range(steps)]


def sample(logits: torch.Tensor, s: DecodeSettings, generator: torch.Generator | None):
    """A token for every position, and its confidence: the probability of that token under the distribution it was
    drawn from (temperature, then top-k, then top-p), as SDAR computes it; with confidence "model", its probability
    under the model's own distribution (temperature 1, no filter), which still ranks the tokens of a greedy block."""
    logits = logits.float()
    tokens, confidence = _draw(logits, s, generator)
    if s.confidence == "model":
        confidence = logits.softmax(-1).gather(-1, tokens[..., None])[..., 0]
    return tokens, confidence


def _draw(logits: torch.Tensor, s: DecodeSettings, generator: torch.Generator | None):
    if s.temperature == 0:
        confidence, tokens = logits.softmax(-1).max(-1)
        return tokens, confidence
    if s.top_k == 1:  # the filtered distribution is one-hot
        return logits.argmax(-1), torch.ones(logits.shape[:-1], device=logits.device)
    logits = logits / s.temperature
    if s.top_k > 0:
        kth = torch.topk(logits, min(s.top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if s.top_p < 1.0:
        ordered, order = torch.sort(logits, dim=-1, descending=True)
        probs = ordered.softmax(-1)
        drop = probs.cumsum(-1) - probs > s.top_p  # the mass before this token already exceeds top_p
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    probs = logits.softmax(-1)
    flat = probs.reshape(-1, probs.shape[-1])
    tokens = torch.multinomial(flat, 1, generator=generator).view(probs.shape[:-1])
    return tokens, probs.gather(-1, tokens[..., None])[..., 0]


def to_commit(confidence: torch.Tensor, masked: torch.Tensor, count: torch.Tensor, threshold: float | None):
    """The masked positions to commit: per row the `count` most confident (ties go left), and with a threshold
    (dynamic) also every one whose confidence exceeds it."""
    confidence = confidence.masked_fill(~masked, float("-inf"))
    order = torch.sort(confidence, dim=1, descending=True, stable=True).indices
    ranks = torch.arange(order.shape[1], device=order.device).expand_as(order)
    rank = torch.empty_like(order).scatter_(1, order, ranks)
    commit = rank < count[:, None]
    if threshold is not None:
        commit |= confidence > threshold
    return commit & masked


def visible_keys(done: int, start: int, size: int, keys: int, device) -> torch.Tensor:
    """[1, 1, done + size, keys] bool for a pass over a finished block (`done` rows, which see keys before `start`)
    and the block after it (`size` rows, which see every key before `start + size`). Built on the device without
    a copy from the host, which would wait for the GPU in the middle of decoding."""
    rows = torch.arange(done + size, device=device)
    limit = torch.where(rows < done, start, start + size)
    return (torch.arange(keys, device=device)[None, :] < limit[:, None])[None, None]


class Runner:
    """What `generate` asks of a runner: prefill the prompt, denoise a block, store a finished block's K/V; and
    the one choice every runner makes alike, in `store`: when that K/V is written.

    A subclass runs the model in the passes `_prefill`, `_denoise`, `_commit` and `_commit_and_denoise`; `forwards`
    counts them since the last prefill.
    """

    def __init__(self, fused_writes: bool = True):
        self.fused_writes = fused_writes  # False: a finished block's K/V is always written by a pass of its own
        self.pending = None  # (block, positions, start) of the finished block whose K/V the next pass writes
        self.fuse = False
        self.forwards = 0

    def prefill(self, tokens, positions, valid, block_size):
        """Start a batch (`valid` [B, total]: False at pads) with the prompt's whole blocks, run block-causally."""
        batch = valid.shape[0]
        # While the rows stay few, a pass costs what reading the weights costs, and one 8-row pass writing a block
        # and denoising the next replaces two 4-row ones (H200, b=1: 314-347 tok/s against 261). With many rows
        # the passes are bound by compute, and one long pass was slower (b=64: 8020 tok/s against 9753).
        self.fuse = self.fused_writes and batch * 2 * block_size <= FUSED_PASS_ROWS
        self.pending, self.forwards = None, 0
        self._prefill(tokens, positions, valid, block_size)
        self.forwards += int(tokens.shape[1] > 0)

    def denoise(self, block, positions, start):
        """Logits of the block, attending to the cache and to the whole block; the cache keeps final K/V only.
        A finished block's K/V still to write (`store`) is written first, by this very pass where it is fused."""
        pending, self.pending = self.pending, None
        if pending is not None and self.fuse:
            return self.commit_and_denoise(*pending[:2], block, positions, start)
        if pending is not None:
            self.commit(*pending)
        self.forwards += 1
        return self._denoise(block, positions, start)

    def store(self, block, positions, start):
        """The block's tokens are final: keep its K/V for the blocks after it. It is written by the next pass, so
        the last block's, never needed, is never written."""
        if self.pending is not None:  # the block ran no pass (in generate every block runs one): write the one before
            self.commit(*self.pending)
        self.pending = (block, positions, start)

    def commit(self, block, positions, start):
        """Write the K/V of the block's final tokens into the cache now, in a pass of its own."""
        self.forwards += 1
        self._commit(block, positions, start)

    def commit_and_denoise(self, done, done_positions, block, positions, start):
        """`commit(done)` then `denoise(block)` in one pass over both (`done` is the block just before `block`): the
        finished block's rows see the keys before `start`, the new block's rows also see both blocks; only the
        finished block's K/V is kept. One forward instead of two."""
        self.forwards += 1
        return self._commit_and_denoise(done, done_positions, block, positions, start)


class CacheRunner(Runner):
    """Runs blocks through the plain model with a growing KVCache and the eager kernels: the reference, on any
    device."""

    def __init__(self, model: SDARModel, fused_writes: bool = True):
        super().__init__(fused_writes)
        self.model = model

    def extend(self, block, positions, start):
        """`commit`, returning the block's logits too: a causal LM's step, whose final token predicts the next."""
        self.forwards += 1
        return self.model.logits(self._run(block, positions, self._visible(block, start), write=True))

    def _prefill(self, tokens, positions, valid, block_size):
        self.valid, self.cache = valid, KVCache(self.model.config.num_hidden_layers)
        if tokens.shape[1] == 0:
            return
        index = torch.arange(tokens.shape[1], device=tokens.device)
        mask = block_causal_mask(index, index, block_size) & valid[:, None, None, : tokens.shape[1]]
        mask |= torch.eye(tokens.shape[1], dtype=torch.bool, device=tokens.device)  # padding sees itself: no NaN
        self._run(tokens, positions, mask, write=True)

    def _denoise(self, block, positions, start):
        return self.model.logits(self._run(block, positions, self._visible(block, start), write=False))

    def _commit(self, block, positions, start):
        self._run(block, positions, self._visible(block, start), write=True)

    def _commit_and_denoise(self, done, done_positions, block, positions, start):
        n, end = done.shape[1], start + block.shape[1]
        visible = self.valid[:, None, None, :end] & visible_keys(n, start, block.shape[1], end, block.device)
        self.cache.keep = n
        try:
            hidden = self._run(torch.cat((done, block), 1), torch.cat((done_positions, positions), 1), visible, True)
        finally:
            self.cache.keep = None
        return self.model.logits(hidden[:, n:])

    def _visible(self, block, start):
        # Every valid key before the block's end: earlier blocks (final K/V) and the block itself (bidirectionally).
        return self.valid[:, None, None, : start + block.shape[1]].expand(-1, 1, block.shape[1], -1)

    def _run(self, tokens, positions, mask, write):
        self.cache.write = write
        return self.model.hidden(tokens, positions, mask, self.cache)


@torch.inference_mode()
def generate(
    model: SDARModel,
    prompt_ids: list[list[int]],
    settings=None,
    on_block: Callable[[DecodeProgress], None] | None = None,
    cancel: Callable[[], bool] | None = None,
    *,
    tokenizer=None,
    runner=None,
    **overrides,
) -> list[Generation]:
    """Decode a batch of prompts by block diffusion (docs/ALGORITHMS.md section 2); one Generation per prompt.
    A causal LM (model.config.causal) is decoded autoregressively by `generate_causal` instead.

    settings: DecodeSettings, dice_lsp.settings.Decoding or None; keyword overrides win (e.g. seed=0).
    """
    s = resolve(settings, model.config, **overrides)
    if not prompt_ids:
        return []
    if any(len(p) == 0 for p in prompt_ids):
        raise EngineError("cannot decode from an empty prompt")
    if model.config.causal:
        return generate_causal(model, prompt_ids, s, on_block, cancel, tokenizer=tokenizer, runner=runner)
    began = time.perf_counter()
    runner = runner or CacheRunner(model)
    device = model.lm_head.weight.device
    bs, B, stops = s.block_size, len(prompt_ids), set(s.stop_token_ids)

    at = _Layout.of(prompt_ids, bs, s.max_new_tokens, model.config, device)
    tokens, positions, start, origin = at.tokens, at.positions, at.start, at.origin
    trace = torch.full((B, at.total), -1, dtype=torch.long, device=device)
    generator = torch.Generator(device=device)
    generator.manual_seed(s.seed) if s.seed is not None else generator.seed()

    runner.prefill(tokens[:, :origin], positions[:, :origin], at.valid, bs)
    step = 0
    done: list[tuple[int, str] | None] = [None] * B  # (generated length, stop reason) once a row has stopped
    blocks = 0
    for blocks in range(1, at.blocks + 1):
        lo, hi = origin + (blocks - 1) * bs, origin + blocks * bs
        if cancel is not None and cancel():
            blocks -= 1
            break
        block, where = tokens[:, lo:hi], positions[:, lo:hi]  # views: commits land in `tokens`
        live = torch.tensor([d is None for d in done], device=device)
        masked = at.new[:, lo:hi] & live[:, None]
        counts = [0 if done[r] else max(0, min(bs, hi - max(lo, start[r]))) for r in range(B)]
        step = _denoise(runner, block, where, lo, masked, counts, s, generator, trace[:, lo:hi], step)
        runner.store(block, where, lo)  # its final K/V, which later blocks attend to (written with the next pass)

        _check_stops(done, block.tolist(), lo, start, stops, s.max_new_tokens)  # once per block
        if on_block is not None:
            on_block(_progress(blocks, lo, hi, start, done, tokens, tokenizer, began))
        if all(d is not None for d in done):
            break

    return _generations(prompt_ids, tokens, trace, start, done, origin + blocks * bs, step, runner.forwards, tokenizer,
                        began)


@dataclass
class _Layout:
    """Where each row's prompt and new tokens lie. Each row is its prompt then MASKs, left-padded by whole blocks so
    that every row's first block with a MASK is the same physical block (`origin`). Pads are never attended to;
    positions (for RoPE) restart at each prompt."""

    tokens: torch.Tensor  # [B, total]: EOS pads, the prompt, MASKs
    valid: torch.Tensor  # [B, total]: False on pads
    positions: torch.Tensor  # [B, total]
    new: torch.Tensor  # [B, total]: True from each row's first new token on
    start: list[int]  # physical index of each row's first new token
    origin: int  # the first block with a MASK
    blocks: int  # blocks to decode from `origin`
    total: int

    @classmethod
    def of(cls, prompt_ids: list[list[int]], bs: int, max_new_tokens: int, config: ModelConfig,
           device: torch.device) -> _Layout:
        B = len(prompt_ids)
        first = [len(p) // bs for p in prompt_ids]
        shift = [(max(first) - f) * bs for f in first]
        start = [sh + len(p) for sh, p in zip(shift, prompt_ids)]
        origin = max(first) * bs
        n_blocks = max(math.ceil((st + max_new_tokens - origin) / bs) for st in start)
        total = origin + n_blocks * bs
        tokens = torch.full((B, total), config.mask_token_id, dtype=torch.long, device=device)
        valid = torch.ones((B, total), dtype=torch.bool, device=device)
        for row, prompt in enumerate(prompt_ids):
            tokens[row, : shift[row]] = config.eos_token_id
            valid[row, : shift[row]] = False
            tokens[row, shift[row] : start[row]] = torch.tensor(prompt, device=device)
        shifts = torch.tensor(shift, device=device)
        positions = (torch.arange(total, device=device)[None] - shifts[:, None]).clamp(min=0)
        new = torch.arange(total, device=device)[None] >= torch.tensor(start, device=device)[:, None]
        return cls(tokens, valid, positions, new, start, origin, n_blocks, total)


def _denoise(runner: Runner, block: torch.Tensor, where: torch.Tensor, lo: int, masked: torch.Tensor,
             counts: list[int], s: DecodeSettings, generator: torch.Generator, trace: torch.Tensor, step: int) -> int:
    """One block's denoising passes: each samples every masked position and commits the most confident (static:
    `counts[r]` new tokens of row r over `s.steps` passes; dynamic: those over the threshold), in place in `block`,
    each commit's pass number in `trace`. Returns the pass count so far."""
    schedule = [transfer_schedule(c, s.steps) for c in counts]
    per_pass = torch.tensor(schedule, device=block.device).T  # [steps, B]
    for i in range(s.steps):
        if s.strategy == "static" and not any(row[i] for row in schedule):
            continue  # nothing to commit in this pass for any row
        if s.strategy == "dynamic" and not masked.any():
            break
        logits = runner.denoise(block, where, lo)
        sampled, confidence = sample(logits, s, generator)
        commit = to_commit(confidence, masked, per_pass[i], s.threshold if s.strategy == "dynamic" else None)
        block.copy_(torch.where(commit, sampled, block))
        trace.masked_fill_(commit, step)
        masked &= ~commit
        step += 1
    return step


def generate_causal(
    model: SDARModel,
    prompt_ids: list[list[int]],
    s: DecodeSettings,
    on_block: Callable[[DecodeProgress], None] | None = None,
    cancel: Callable[[], bool] | None = None,
    *,
    tokenizer=None,
    runner=None,
) -> list[Generation]:
    """Plain autoregressive decoding of a causal LM (e.g. HF Qwen3ForCausalLM): SDAR's block size 1 with one step,
    except that the logits are shifted, so the last final token's pass predicts the next token.

    Each step runs the newest token of every row once: that pass writes its K/V (it is final) and gives the logits
    of the token after it, which is sampled (`sample`) and committed. A token's trace is its step, and each token
    counts as a block for `on_block`. Called by `generate`; on_block, cancel, stops, batching and results as there;
    steps, strategy and threshold (diffusion settings) do not apply.
    The GPU GraphRunner is SDAR-only for now: any other runner is replaced here by the plain CacheRunner.
    """
    began = time.perf_counter()
    runner = runner if isinstance(runner, CacheRunner) else CacheRunner(model)
    device = model.lm_head.weight.device
    B, stops = len(prompt_ids), set(s.stop_token_ids)

    # Layout: prompts right-aligned (left-padded) so that they all end at physical index `origin`; pads are never
    # attended to; positions (for RoPE) restart at each prompt.
    origin = max(len(p) for p in prompt_ids)
    total = origin + s.max_new_tokens
    start = [origin] * B  # physical index of each row's first new token
    shift = [origin - len(p) for p in prompt_ids]
    tokens = torch.full((B, total), model.config.eos_token_id, dtype=torch.long, device=device)
    valid = torch.ones((B, total), dtype=torch.bool, device=device)
    for row, prompt in enumerate(prompt_ids):
        valid[row, : shift[row]] = False
        tokens[row, shift[row] : origin] = torch.tensor(prompt, device=device)
    positions = (torch.arange(total, device=device)[None] - torch.tensor(shift, device=device)[:, None]).clamp(min=0)
    trace = torch.full((B, total), -1, dtype=torch.long, device=device)
    generator = torch.Generator(device=device)
    generator.manual_seed(s.seed) if s.seed is not None else generator.seed()

    # The prompt but its last token is prefilled; the last token's pass, the first step, predicts the first new one.
    runner.prefill(tokens[:, : origin - 1], positions[:, : origin - 1], valid, 1)
    done: list[tuple[int, str] | None] = [None] * B  # (generated length, stop reason) once a row has stopped
    steps = 0
    while not all(d is not None for d in done):  # max_new_tokens stops every row, at the latest
        if cancel is not None and cancel():
            break
        i = origin + steps  # the token this step commits; the pass runs the one before it
        logits = runner.extend(tokens[:, i - 1 : i], positions[:, i - 1 : i], i - 1)
        sampled, _ = sample(logits, s, generator)
        tokens[:, i : i + 1] = sampled
        trace[:, i] = steps
        steps += 1
        _check_stops(done, sampled.tolist(), i, start, stops, s.max_new_tokens)
        if on_block is not None:
            on_block(_progress(steps, i, i + 1, start, done, tokens, tokenizer, began))
    return _generations(prompt_ids, tokens, trace, start, done, origin + steps, steps, runner.forwards, tokenizer,
                        began)


def _check_stops(done, committed: list[list[int]], lo: int, start: list[int], stops: set[int], max_new: int) -> None:
    """Mark the rows that stopped within the tokens just committed at physical indices lo, lo + 1, ...: at a stop
    token (kept; what follows is dropped) or at max_new generated tokens."""
    for r, row in enumerate(committed):
        if done[r] is not None:
            continue
        for j, token in enumerate(row):
            made = lo + j - start[r] + 1  # tokens generated up to and including this one
            if made < 1:
                continue
            if token in stops:
                done[r] = (made, "stop")
                break
            if made >= max_new:
                done[r] = (made, "length")
                break


def _generations(prompt_ids, tokens, trace, start, done, end_of_decoding, steps, forwards, tokenizer, began):
    """One Generation per row; a row that never stopped was cancelled at `end_of_decoding` (a physical index)."""
    if tokens.device.type == "cuda":
        torch.cuda.synchronize(tokens.device)
    seconds = time.perf_counter() - began
    rows, traces = tokens.tolist(), trace.tolist()
    out = []
    for r in range(len(prompt_ids)):
        made, reason = done[r] if done[r] is not None else (max(0, end_of_decoding - start[r]), "cancelled")
        ids = tuple(rows[r][start[r] : start[r] + made])
        out.append(
            Generation(
                token_ids=ids,
                trace=tuple(traces[r][start[r] : start[r] + made]),
                stop_reason=reason,
                text=tokenizer.decode(ids, skip_special_tokens=True) if tokenizer is not None else "",
                prompt_tokens=len(prompt_ids[r]),
                steps=steps,
                forwards=forwards,
                seconds=seconds,
            )
        )
    return out


def _progress(blocks, lo, hi, start, done, tokens, tokenizer, began) -> DecodeProgress:
    made = tuple(d[0] if d is not None else max(0, hi - s) for d, s in zip(done, start))
    preview = ""
    if tokenizer is not None:
        tail = tokens[0, max(start[0], start[0] + made[0] - 64) : start[0] + made[0]].tolist()
        preview = tokenizer.decode(tail, skip_special_tokens=True)
    return DecodeProgress(blocks, made, sum(d is not None for d in done), time.perf_counter() - began, preview)
