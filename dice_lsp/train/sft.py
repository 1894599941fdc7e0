"""Block-diffusion SFT (docs/ALGORITHMS.md section 3): each sample becomes [x_t | x_0] and trains at x_t's masks.

Noise is drawn from a generator seeded by (seed, epoch, sample), so a resumed run sees exactly the same batches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from dice_lsp.engine.checkpoint import resolve
from dice_lsp.engine.config import ModelConfig, read_json
from dice_lsp.engine.tokenizer import Tokenizer
from dice_lsp.train.data import Sample, read_pairs, sft_samples
from dice_lsp.train.distributed import all_sum
from dice_lsp.train.errors import TrainError
from dice_lsp.train.pack import IGNORE, Piece, group, join
from dice_lsp.train.run import RunConfig, TrainingRun

MIN_NOISE = 1e-3


@dataclass
class SFTConfig:
    data: str  # JSONL of {reference, solution}
    epochs: int = 3
    batch_size: int = 8  # samples per optimizer step, over all ranks
    cutoff: int = 6144  # tokens per sample (prompt + answer) at most; longer answers are cut
    token_budget: int = 0  # tokens per packed row; 0 = 2 * cutoff (one sample's two copies)
    kinds: tuple[str, ...] = ("e2e", "infill")
    max_steps: int = 0  # stop early (0 = the epochs decide)


def noise_level(generator: torch.Generator) -> float:
    """p = (1 - 1e-3) t + 1e-3 with t ~ U(0, 1): one level per sample."""
    t = float(torch.rand((), generator=generator))
    return (1 - MIN_NOISE) * t + MIN_NOISE


def sft_piece(prompt: list[int] | tuple[int, ...], answer: list[int] | tuple[int, ...], block_size: int,
              mask_id: int, eos_id: int, generator: torch.Generator, sample: int = 0, trim: bool = True) -> Piece:
    """[x_t | x_0] of one sample: answer padded with EOS to a block multiple (pads are trained), each answer token
    of x_t masked with probability p (at least one), the prompt never; both copies share position ids.

    With `trim`, x_t starts at the block holding the first answer token: its earlier blocks are prompt only, are
    never trained, and no token that is trained can see them (a noisy token sees its own block and clean earlier
    blocks), so dropping them leaves every loss and gradient unchanged and saves the prompt's length in compute."""
    clean = list(prompt) + list(answer)
    clean += [eos_id] * (-len(clean) % block_size)
    n, start = len(clean), len(prompt)
    x0 = torch.tensor(clean, dtype=torch.long)
    p = noise_level(generator)
    masked = torch.zeros(n, dtype=torch.bool)
    masked[start:] = torch.rand(n - start, generator=generator) < p
    if not masked.any():
        masked[start + int(torch.randint(n - start, (), generator=generator))] = True
    keep = (start // block_size) * block_size if trim else 0  # first x_t position kept
    xt = torch.where(masked, torch.full_like(x0, mask_id), x0)[keep:]
    noisy = n - keep
    target = torch.full((noisy + n,), IGNORE, dtype=torch.long)
    target[:noisy][masked[keep:]] = x0[keep:][masked[keep:]]
    weight = torch.zeros(noisy + n)
    weight[:noisy][masked[keep:]] = 1.0 / p
    position = torch.cat([torch.arange(keep, n), torch.arange(n)])
    copy = torch.cat([torch.ones(noisy, dtype=torch.long), torch.zeros(n, dtype=torch.long)])
    return Piece(torch.cat([xt, x0]), position, copy, target, weight, n - start, sample)


def sft_loss(ce: torch.Tensor, weight: torch.Tensor, answer_tokens: float) -> torch.Tensor:
    """sum over masked tokens of CE / p, divided by the number of answer tokens."""
    return (ce * weight).sum() / answer_tokens


def sample_generator(seed: int, epoch: int, index: int) -> torch.Generator:
    generator = torch.Generator()
    generator.manual_seed(((seed * 1_000_003 + epoch) * 1_000_033 + index) % (2**63))
    return generator


def epoch_order(seed: int, epoch: int, n: int) -> list[int]:
    generator = torch.Generator()
    generator.manual_seed(seed * 7919 + epoch)
    return torch.randperm(n, generator=generator).tolist()


def fit(samples: list[Sample], cutoff: int) -> tuple[list[Sample], int]:
    """Samples cut to `cutoff` tokens (answers lose their tail); those whose prompt alone fills it are dropped."""
    kept, dropped = [], 0
    for s in samples:
        if len(s.prompt_ids) >= cutoff:
            dropped += 1
            continue
        kept.append(Sample(s.prompt_ids, s.answer_ids[: cutoff - len(s.prompt_ids)], s.kind, s.pair))
    return kept, dropped


def train(run_config: RunConfig, config: SFTConfig) -> dict:
    """Run (or resume) SFT; returns a summary with the final checkpoint's path."""
    pairs = read_pairs(config.data)
    run = None
    try:
        tokenizer_source = _tokenizer_and_config(run_config.model)
        samples, skipped = sft_samples(*tokenizer_source, pairs, config.kinds)
        samples, too_long = fit(samples, config.cutoff)
        if too_long:
            skipped["prompt longer than --cutoff"] = too_long
        if not samples:
            raise TrainError(f"{config.data}: no usable samples ({skipped})")
        per_epoch = math.ceil(len(samples) / config.batch_size)
        total = per_epoch * config.epochs
        if config.max_steps:
            total = min(total, config.max_steps)
        run = TrainingRun(run_config, "sft", total)
        if run.world.size > config.batch_size:
            raise TrainError(f"--batch-size {config.batch_size} is smaller than the {run.world.size} ranks")
        budget = config.token_budget or 2 * (config.cutoff + run.model_config.block_size)
        pad_rows = run.objective.attention == "flex"  # compiled FlexAttention wants one shape
        bar = run.progress_bar(run.step)
        while run.step < total and not run.out_of_time():
            epoch, index = divmod(run.step, per_epoch)
            order = epoch_order(run_config.seed, epoch, len(samples))
            chosen = order[index * config.batch_size : (index + 1) * config.batch_size]
            record = sft_step(run, samples, chosen, epoch, budget, pad_rows)
            record["epoch"] = epoch
            run.log(record)
            bar.update(1)
            bar.set_postfix(loss=f"{record['loss']:.4f}")
            if run.step % run_config.save_every == 0 and run.step < total:
                run.save()
        bar.close()
        final = run.finish()
        return {"final": str(final) if final else None, "steps": run.step, "samples": len(samples),
                "stopped_by_time_limit": run.step < total, "paused": run.step < total and run.paused(),
                "skipped": skipped, "resumed_from": str(run.resumed_from) if run.resumed_from else None}
    finally:
        if run is not None:
            run.close()


def sft_step(run: TrainingRun, samples: list[Sample], chosen: list[int], epoch: int, budget: int,
             pad_rows: bool) -> dict:
    """One optimizer step over the samples `chosen` (this rank takes every world-size-th one)."""
    cfg = run.model_config
    mine = chosen[run.world.rank :: run.world.size]
    pieces = [sft_piece(samples[i].prompt_ids, samples[i].answer_ids, cfg.block_size, cfg.mask_token_id,
                        cfg.eos_token_id, sample_generator(run.config.seed, epoch, i), i) for i in mine]
    answer_tokens = sum(p.answer_tokens for p in pieces)
    # The normaliser is the step's answer tokens over all ranks; DDP averages gradients, so scale by world size.
    total_answer = all_sum(answer_tokens, run.world, run.device)
    rows = [join(g, budget if pad_rows else None, cfg.eos_token_id) for g in group(pieces, budget)] or [run.idle_row()]
    loss_sum, masked = 0.0, 0
    for i, row in enumerate(rows):
        ce = run.cross_entropy(row, sync=i == len(rows) - 1)
        weight = row.weight.to(run.device).reshape(-1)[row.target.reshape(-1).to(run.device) != IGNORE]
        loss = sft_loss(ce, weight, total_answer) * run.world.size
        loss.backward()
        loss_sum += float(loss.detach()) / run.world.size
        masked += ce.numel()
    record = run.optimizer_step()
    # Every count is over all ranks, so one process and many log the same record for the same global batch.
    record.update(loss=all_sum(loss_sum, run.world, run.device), answer_tokens=total_answer,
                  masked_tokens=int(all_sum(masked, run.world, run.device)),
                  rows=int(all_sum(len(rows), run.world, run.device)))
    return record


def _tokenizer_and_config(model_ref: str) -> tuple[Tokenizer, ModelConfig]:
    path = resolve(model_ref)
    return Tokenizer.from_dir(path), ModelConfig.from_hf(read_json(path / "config.json") or {})
