"""`dice-lsp train sft|rl`: block-diffusion SFT and BiC-RL of a DICE checkpoint, resumable, on one GPU or many
(`torchrun --nproc-per-node N $(which dice-lsp) train ...` runs the same command under DDP, or FSDP with --fsdp)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from dice_lsp.commands.arguments import count, device, number, positive
from dice_lsp.commands.decoding import add_decoding_options
from dice_lsp.commands.errors import CommandError
from dice_lsp.engine.errors import EngineError
from dice_lsp.train.rewards import REWARD_CHECKS
from dice_lsp.train.rollout import ROLLOUT_DECODING

# Training loads torch (over a second) and the model code: each `run_*` imports its part of dice_lsp.train when the
# command runs, so `dice-lsp --help` stays fast. Defaults shown in --help come from torch-free modules.

SHAPE_OPTIONS = (
    ("vocab_size", "tokenizer vocabulary (default 4096)"),
    ("hidden_size", "default 384"),
    ("layers", "default 8"),
    ("heads", "attention heads (default 6)"),
    ("kv_heads", "key/value heads, GQA (default 2)"),
    ("head_dim", "default 64"),
    ("intermediate_size", "SwiGLU width (default 1024)"),
    ("block_size", "tokens per diffusion block (default 4, DICE's)"),
    ("max_positions", "longest sequence, prompt + answer (default 4096)"),
)


def _common(parser: argparse.ArgumentParser, lr: float) -> None:
    parser.add_argument("--model", required=True, help="checkpoint to start from (directory or cached hub id)")
    parser.add_argument("--data", required=True, help="JSONL of {reference, solution, level?}")
    parser.add_argument("--out", required=True, help="run directory (checkpoints, final/, metrics, plots)")
    parser.add_argument("--lr", type=number(low_open=True), default=lr, help="peak learning rate (default %(default)g)")
    parser.add_argument("--warmup-steps", type=count, default=0,
                        help="optimizer steps of linear warm-up to --lr (default 0)")
    parser.add_argument("--schedule", choices=("cosine", "constant"), default="cosine",
                        help="the learning rate after warm-up: cosine decay to 10%% of --lr, or constant "
                             "(default cosine)")
    parser.add_argument("--weight-decay", type=number(), default=0.0, help="AdamW weight decay (default 0)")
    parser.add_argument("--grad-clip", type=number(low_open=True), default=1.0,
                        help="clip the gradient's global norm to this (default 1.0; inf: no clipping)")
    parser.add_argument("--lora-rank", type=count, default=0, help="LoRA rank (0 = full fine-tuning)")
    parser.add_argument("--lora-alpha", type=number(low_open=True), default=32.0,
                        help="LoRA scaling numerator: updates are scaled by alpha / rank (default 32)")
    parser.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto",
                        help="auto: bf16 autocast on GPU, fp32 on CPU (master weights are fp32)")
    parser.add_argument("--gradient-checkpointing", action="store_true",
                        help="recompute each layer's activations in the backward pass: less memory, more time")
    parser.add_argument("--attention", choices=("auto", "sdpa", "flex"), default="auto",
                        help="the block-diffusion attention: sdpa with a dense mask, or FlexAttention with a block "
                             "mask (auto: flex on GPU, sdpa on CPU)")
    parser.add_argument("--device", type=device, default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--fsdp", action="store_true", help="shard weights over ranks (torchrun) instead of DDP")
    parser.add_argument("--save-every", type=positive, default=100, help="checkpoint every N steps (default 100)")
    parser.add_argument("--keep", type=count, default=2, help="checkpoints to keep (default 2; 0 = all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of every random draw (default 0; rank r adds r)")
    parser.add_argument("--no-resume", action="store_true", help="start over even if OUT has a checkpoint")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument("--time-limit", type=number(), default=0.0, metavar="SECONDS",
                        help="stop after this much training, resumes included; the learning rate then decays with "
                             "the clock instead of the step count (0 = no limit)")
    parser.add_argument("--stop-after", type=number(), default=0.0, metavar="SECONDS",
                        help="stop this run after this much training and save it; the same command continues it "
                             "(with --time-limit, the schedule spans the whole limit across the pieces)")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("train", help="fine-tune a DICE model (SFT or RL)")
    stages = parser.add_subparsers(dest="stage_command", metavar="KIND", required=True)
    init = stages.add_parser("init", help="a new small model from scratch: tokenizer learned from DATA, random weights",
                             description="Learn a byte-level BPE tokenizer from DATA's prompts and solutions and write "
                                         "a randomly initialised SDAR checkpoint to OUT, to start `train sft` from. "
                                         "The defaults are the bundled model's shape.")
    init.add_argument("--data", required=True, help="JSONL of {reference, solution} (e.g. from `dice-lsp data tasks`)")
    init.add_argument("--out", required=True, help="checkpoint directory to write")
    # Defaults (None here) come from dice_lsp.train.scratch.Shape when the command runs, so --help stays fast.
    for name, help_text in SHAPE_OPTIONS:
        init.add_argument("--" + name.replace("_", "-"), type=positive, default=None, help=help_text)
    init.add_argument("--seed", type=int, default=0, help="for the random weights (default 0)")
    init.add_argument("--force", action="store_true",
                      help="replace OUT where it holds anything (default: refuse; it may be a trained model)")
    init.set_defaults(run=run_init)
    sft = stages.add_parser("sft", help="block-diffusion supervised fine-tuning")
    _common(sft, 1e-5)
    sft.add_argument("--epochs", type=positive, default=3, help="passes over the data (default 3)")
    sft.add_argument("--batch-size", type=positive, default=8,
                     help="samples per optimizer step, all ranks together (default 8)")
    sft.add_argument("--cutoff", type=positive, default=6144,
                     help="tokens per sample at most, prompt included (default 6144)")
    sft.add_argument("--token-budget", type=count, default=0, help="tokens per packed row (0 = 2 x cutoff)")
    sft.add_argument("--kinds", default="e2e,infill",
                     help="sample kinds, comma-separated: e2e (whole solution), infill (the CUDA core) or both")
    sft.add_argument("--max-steps", type=count, default=0, help="stop after this many optimizer steps (0 = no limit)")
    sft.set_defaults(run=run_sft)
    rl = stages.add_parser("rl", help="BiC-RL: rollouts, harness rewards, TraceRL updates")
    _common(rl, 1e-6)
    rl.add_argument("--stage", choices=("infill", "e2e"), required=True,
                    help="infill = stage 1; e2e = stage 2 (start it from stage 1's OUT/final)")
    rl.add_argument("--steps", type=count, default=0, help="optimizer steps (0 = one pass over the tasks)")
    rl.add_argument("--tasks-per-step", type=positive, default=64, help="problems per optimizer step (default 64)")
    rl.add_argument("--group-size", type=positive, default=16,
                    help="rollouts per problem; rewards are compared within a group (default 16)")
    # Rollouts decode as BiC-RL does (dynamically, at tau 0.9); --steps above counts optimizer steps, not passes.
    add_decoding_options(rl.add_argument_group("rollout decoding"), ROLLOUT_DECODING,
                         ("threshold", "temperature", "max_new_tokens"))
    rl.add_argument("--rollout-batch", type=positive, default=64, help="sequences decoded together (default 64)")
    rl.add_argument("--speed-weight", type=number(), default=0.0,
                    help="bonus per log2 speedup for correct samples (0 = DICE's binary reward)")
    rl.add_argument("--harness-device", type=device, default="auto",
                    help="where rewards are checked: auto, cpu, cuda or cuda:N")
    rl.add_argument("--token-budget", type=positive, default=16384,
                    help="tokens per packed row in the policy update (default 16384)")
    rl.set_defaults(run=run_rl)
    for leaf in (init, sft, rl):  # what every other command prints with --json, so a script may pass it to all
        leaf.add_argument("--json", action="store_true", help="the summary on stdout is JSON with or without this")


def _run_config(args):
    from dice_lsp.train.run import RunConfig  # torch: see the note at the top

    return RunConfig(model=args.model, out=args.out, seed=args.seed, lr=args.lr, weight_decay=args.weight_decay,
                     warmup_steps=args.warmup_steps, schedule=args.schedule, grad_clip=args.grad_clip,
                     lora_rank=args.lora_rank, lora_alpha=args.lora_alpha, precision=args.precision,
                     gradient_checkpointing=args.gradient_checkpointing, attention=args.attention,
                     device=args.device, fsdp=args.fsdp, save_every=args.save_every, keep=args.keep,
                     resume=not args.no_resume, progress=not args.no_progress, time_limit=args.time_limit,
                     stop_after=args.stop_after)


def _guarded(action):
    try:
        return action()
    except EngineError as error:
        raise CommandError(str(error)) from None


def run_init(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if out.is_file() or (out.is_dir() and any(out.iterdir()) and not args.force):
        what = "is a file" if out.is_file() else "is not empty (a checkpoint of an earlier run?)"
        raise CommandError(f"{out} {what}; name a new directory" + ("" if out.is_file() else
                                                                  ", or pass --force to replace it"))
    from dice_lsp.train.scratch import Shape, new_model  # torch: see the note at the top

    shape = Shape(**{name: getattr(args, name) for name, _ in SHAPE_OPTIONS if getattr(args, name) is not None})
    summary = _guarded(lambda: new_model(args.data, args.out, shape, args.seed))
    print(json.dumps(summary, indent=2))
    return 0


def run_sft(args: argparse.Namespace) -> int:
    from dice_lsp.train.sft import SFTConfig, train  # torch: see the note at the top

    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    config = SFTConfig(data=args.data, epochs=args.epochs, batch_size=args.batch_size, cutoff=args.cutoff,
                       token_budget=args.token_budget, kinds=kinds, max_steps=args.max_steps)
    summary = _guarded(lambda: train(_run_config(args), config))
    _report(summary, args)
    return 0


def _report(summary: dict, args: argparse.Namespace) -> None:
    """The run's summary as JSON on stdout (rank 0 only); a paused run also says how to go on."""
    if not summary.get("final"):
        return
    print(json.dumps(summary, indent=2, default=str))
    if summary.get("paused"):
        print(f"paused after --stop-after {args.stop_after:g} s at step {summary['steps']}; {args.out} holds a "
              "checkpoint: run the same command again to continue", file=sys.stderr)


def run_rl(args: argparse.Namespace) -> int:
    from dice_lsp.train.rl import RLConfig, train  # torch: see the note at the top

    config = RLConfig(data=args.data, stage=args.stage, steps=args.steps, tasks_per_step=args.tasks_per_step,
                      group_size=args.group_size, max_new_tokens=args.max_new_tokens,
                      temperature=args.temperature, threshold=args.threshold, rollout_batch=args.rollout_batch,
                      speed_weight=args.speed_weight, token_budget=args.token_budget,
                      harness=replace(REWARD_CHECKS, device=args.harness_device))
    summary = _guarded(lambda: train(_run_config(args), config))
    _report(summary, args)
    return 0
