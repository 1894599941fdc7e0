"""SFT throughput of DICE-1.7B's shape on one GPU: tokens/s and MFU of the real training step (packed rows,
3-rule mask, masked-only CE, AdamW), random weights. Prints a table and appends it to benchmarks/RESULTS.md.

MFU = 6 * N * tokens / seconds / peak, N = all parameters, tokens = every token of a row (both copies), and peak =
989 TFLOP/s, the H200's dense bf16 datasheet rate. It ignores attention FLOPs and counts the output head for every
token although the head only runs at masked positions, so it is the usual, comparable (not exact) figure.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import time
from pathlib import Path

import torch

from dice_lsp.engine.config import ModelConfig
from dice_lsp.engine.model import SDARModel
from dice_lsp.train.objective import Objective
from dice_lsp.train.pack import IGNORE, group, join, stack
from dice_lsp.train.sft import sample_generator, sft_loss, sft_piece

PEAK = 989e12  # H200 SXM dense bf16, FLOP/s (datasheet)


def rows(config: ModelConfig, batch: int, row_tokens: int, sample_tokens: int, prompt_tokens: int, step: int):
    """`batch` rows of `row_tokens`, each packed with samples of `sample_tokens` (both copies: 2x)."""
    per_row = max(1, row_tokens // (2 * sample_tokens))
    generator = torch.Generator().manual_seed(step)
    pieces = []
    for i in range(batch * per_row):
        ids = torch.randint(0, 150000, (sample_tokens,), generator=generator).tolist()
        pieces.append(sft_piece(ids[:prompt_tokens], ids[prompt_tokens:], config.block_size, config.mask_token_id,
                                config.eos_token_id, sample_generator(0, step, i), i))
    return stack([join(g, row_tokens, config.eos_token_id) for g in group(pieces, row_tokens)][:batch])


def measure(model, objective, optimizer, config, batch, row_tokens, sample_tokens, warmup, steps):
    times = []
    for step in range(warmup + steps):
        row = rows(config, batch, row_tokens, sample_tokens, sample_tokens // 4, step).to("cuda")
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            ce = objective(row.input_ids, row.position, objective.mask(row), row.target)
        weight = row.weight.reshape(-1)[row.target.reshape(-1) != IGNORE]
        loss = sft_loss(ce, weight, float(sample_tokens))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if step >= warmup:
            times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2], torch.cuda.max_memory_allocated() / 2**30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="flex:1:0,flex:1:1,flex:2:0,sdpa:1:0",
                        help="attention:batch:checkpointing, comma-separated")
    parser.add_argument("--row-tokens", type=int, default=4096)
    parser.add_argument("--sample-tokens", type=int, default=2048, help="prompt + answer of one sample")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--layers", type=int, default=28)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = True
    config = ModelConfig(num_hidden_layers=args.layers)  # DICE-1.7B's shape by default
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = SDARModel(config)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.95), fused=True)
    name = torch.cuda.get_device_name()
    table = [f"| attention | rows x tokens | grad ckpt | step ms | tokens/s | MFU | peak GiB |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    print(f"{name}, torch {torch.__version__}, {n_params / 1e9:.2f}B parameters, fp32 master weights, bf16 autocast")
    for spec in args.configs.split(","):
        attention, batch, ckpt = spec.split(":")
        batch, ckpt = int(batch), ckpt == "1"
        objective = Objective(model, attention)
        model.gradient_checkpointing = ckpt
        torch.cuda.reset_peak_memory_stats()
        try:
            seconds, memory = measure(model, objective, optimizer, config, batch, args.row_tokens,
                                      args.sample_tokens, args.warmup, args.steps)
        except torch.OutOfMemoryError:
            table.append(f"| {attention} | {batch} x {args.row_tokens} | {'on' if ckpt else 'off'} | OOM | | | |")
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            print(table[-1], flush=True)
            continue
        tokens = batch * args.row_tokens / seconds
        mfu = 6 * n_params * tokens / PEAK
        table.append(f"| {attention} | {batch} x {args.row_tokens} | {'on' if ckpt else 'off'} | {seconds * 1e3:.0f} | "
                     f"{tokens:,.0f} | {mfu:.1%} | {memory:.1f} |")
        print(table[-1], flush=True)
    print("\n".join(table))
    if not args.no_record:
        results = Path(__file__).with_name("RESULTS.md")
        section = [
            f"\n## SFT training step, DICE-1.7B shape ({datetime.date.today()}, {name}, {platform.node()})\n",
            f"benchmarks/train.py: {config.num_hidden_layers} layers, random weights, fp32 master weights + bf16 "
            f"autocast, fused AdamW, packed rows of {args.row_tokens} tokens ([x_t | x_0] of {args.sample_tokens}-token "
            f"samples), CE only at masked positions; median of {args.steps} steps after {args.warmup} warm-up. "
            f"MFU = 6 N tokens / time / 989 TFLOP/s (H200 dense bf16 datasheet peak), N = {n_params / 1e9:.2f}B.\n",
            *[line + "\n" for line in table],
        ]
        with results.open("a") as sink:
            sink.writelines(section)


if __name__ == "__main__":
    main()
