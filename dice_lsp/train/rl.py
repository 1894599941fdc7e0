"""BiC-RL (docs/ALGORITHMS.md section 4): rollouts from the engine, harness rewards, group advantages, TraceRL update.

`--stage infill` writes the core between a solution's prefix and suffix; `--stage e2e` starts from stage 1's model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from dice_lsp.engine.decode import generate
from dice_lsp.engine.prompts import extract_code
from dice_lsp.harness import Options
from dice_lsp.train import distributed
from dice_lsp.train.data import easy_to_hard, prompt_ids, read_pairs
from dice_lsp.train.errors import TrainError
from dice_lsp.train.pack import IGNORE, group, join
from dice_lsp.train.rewards import REWARD_CHECKS, group_advantages, judge, outcome
from dice_lsp.train.rollout import ROLLOUT_DECODING
from dice_lsp.train.run import RunConfig, TrainingRun
from dice_lsp.train.trace import ppo_loss, replay_piece


@dataclass
class RLConfig:
    data: str  # JSONL of {reference, solution?, level?}; infilling needs the solution
    stage: str = "infill"  # "infill" (stage 1) or "e2e" (stage 2)
    steps: int = 0  # optimizer steps; 0 = one pass over the tasks
    tasks_per_step: int = 64
    group_size: int = 16
    max_new_tokens: int = ROLLOUT_DECODING.max_new_tokens
    temperature: float = ROLLOUT_DECODING.temperature
    threshold: float = ROLLOUT_DECODING.threshold  # dynamic decoding's confidence threshold
    steps_per_block: int = ROLLOUT_DECODING.steps
    rollout_batch: int = 64  # sequences decoded together
    clip: float = 0.2
    kl_beta: float = 0.01
    speed_weight: float = 0.0  # 0 = DICE's binary reward
    token_budget: int = 16384
    harness: Options = REWARD_CHECKS  # how rewards are checked (device, trials, ...)


def train(run_config: RunConfig, config: RLConfig) -> dict:
    if config.stage not in ("infill", "e2e"):
        raise TrainError(f"--stage must be infill or e2e, not {config.stage!r}")
    pairs = easy_to_hard(read_pairs(config.data, need_solution=config.stage == "infill"))
    per_pass = math.ceil(len(pairs) / config.tasks_per_step)
    total = config.steps or per_pass
    run = TrainingRun(run_config, f"rl-{config.stage}", total)
    try:
        prompts = [prompt_ids(run.tokenizer, p, config.stage) for p in pairs]
        usable = [i for i, p in enumerate(prompts) if p is not None]
        if not usable:
            raise TrainError(f"{config.data}: no task has a prefix/core/suffix split for infilling; use --stage e2e")
        options = reward_checks(config)
        bar = run.progress_bar(run.step)
        last = {}
        while run.step < total and not run.out_of_time():
            index = run.step % math.ceil(len(usable) / config.tasks_per_step)
            tasks = usable[index * config.tasks_per_step : (index + 1) * config.tasks_per_step]
            last = rl_step(run, config, pairs, prompts, tasks, options)
            run.log(last)
            bar.update(1)
            bar.set_postfix(reward=f"{last['reward']:.3f}")
            if run.step % run_config.save_every == 0 and run.step < total:
                run.save()
        bar.close()
        run.state = {"stage": config.stage}
        final = run.finish()
        return {"final": str(final) if final else None, "steps": run.step, "last": last,
                "paused": run.step < total and run.paused()}
    finally:
        run.close()


def reward_checks(config: RLConfig) -> Options:
    """config.harness, timing eager PyTorch when a speed bonus is paid and nothing else is timed."""
    if config.speed_weight and config.harness.baseline == "none":
        return replace(config.harness, baseline="eager")
    return config.harness


def rollouts(run: TrainingRun, config: RLConfig, prompts: list[list[int]], seed: int):
    """G generations per prompt (dynamic decoding, commit traces kept), decoded `rollout_batch` at a time."""
    settings = replace(ROLLOUT_DECODING, block_size=run.model_config.block_size, steps=config.steps_per_block,
                       threshold=config.threshold, temperature=config.temperature,
                       max_new_tokens=config.max_new_tokens, stop_token_ids=run.model_config.stop_token_ids, seed=seed)
    flat = [p for p in prompts for _ in range(config.group_size)]
    out = []
    with run.autocast():
        for lo in range(0, len(flat), config.rollout_batch):
            chunk = flat[lo : lo + config.rollout_batch]
            out.extend(generate(run.model, chunk, settings, tokenizer=run.tokenizer, seed=seed + lo))
    return out


def rl_step(run: TrainingRun, config: RLConfig, pairs, prompts, tasks: list[int], options) -> dict:
    """Rollouts, rewards and one TraceRL policy update for `tasks` (this rank takes every world-size-th one)."""
    cfg = run.model_config
    mine = tasks[run.world.rank :: run.world.size]
    seed = (run.config.seed * 1_000_003 + run.step) * 64 + run.world.rank
    generations = rollouts(run, config, [prompts[i] for i in mine], seed)
    codes = [extract_code(g.text) for g in generations]  # the engine's own extraction, as served
    references = [pairs[i].reference for i in mine for _ in range(config.group_size)]
    outcomes = [outcome(r, config.speed_weight) for r in judge(references, codes, options)]
    pieces = []
    kept_groups = 0
    for t in range(len(mine)):
        members = range(t * config.group_size, (t + 1) * config.group_size)
        advantages = group_advantages([outcomes[k].reward for k in members])
        if advantages is None:
            continue  # every sample scored the same: no signal
        kept_groups += 1
        for k, advantage in zip(members, advantages):
            g = generations[k]
            pieces.append(replay_piece(prompts[mine[t]], g.token_ids, g.trace, cfg.block_size, cfg.mask_token_id,
                                       cfg.eos_token_id, advantage, k))
    samples = distributed.all_sum(len(pieces), run.world, run.device)
    record = {"reward": distributed.all_sum(sum(o.reward for o in outcomes), run.world, run.device)
              / max(1, distributed.all_sum(len(outcomes), run.world, run.device)),
              "correct": distributed.all_sum(sum(o.correct for o in outcomes), run.world, run.device)
              / max(1, distributed.all_sum(len(outcomes), run.world, run.device)),
              "kept_groups": distributed.all_sum(kept_groups, run.world, run.device),
              "tokens_generated": int(distributed.all_sum(sum(len(g.token_ids) for g in generations), run.world,
                                                          run.device))}
    statuses: dict[str, int] = {}
    for o in outcomes:
        statuses[o.status] = statuses.get(o.status, 0) + 1
    record["statuses"] = statuses
    if samples == 0:
        run.step += 1  # nothing to learn from this batch; the step still counts
        run.scheduler.step()
        return {**record, "loss": None, "updated": False}
    rows = [join(g, None, cfg.eos_token_id) for g in group(pieces, config.token_budget)] or [run.idle_row()]
    loss_sum, kl, clipped, trained = 0.0, 0.0, 0.0, 0
    for i, row in enumerate(rows):
        ce = run.cross_entropy(row, sync=i == len(rows) - 1)
        chosen = row.target.reshape(-1) != IGNORE
        logp = -ce
        # One update per rollout batch: the pre-update policy is the current one, so old = logp (no extra forward).
        old = logp.detach()
        loss, stats = ppo_loss(logp, old, row.extra["advantage"].reshape(-1)[chosen].to(run.device),
                               row.weight.reshape(-1)[chosen].to(run.device), config.clip, config.kl_beta)
        loss = loss / samples * run.world.size
        loss.backward()
        loss_sum += float(loss.detach()) / run.world.size
        kl += stats["kl"]
        clipped += stats["clipped"]
        trained += int(chosen.sum())
    record.update(run.optimizer_step())
    record.update(loss=distributed.all_sum(loss_sum, run.world, run.device),
                  kl=distributed.all_sum(kl, run.world, run.device) / max(1, samples),
                  trained_tokens=int(distributed.all_sum(trained, run.world, run.device)), updated=True)
    return record
