"""TraceRL replay (docs/ALGORITHMS.md section 4): a rollout's commit trace turned into the denoising steps to train.

Round r takes, in every block, its r-th commit step s: tokens committed at s are trained, those at s or later masked.
"""

from __future__ import annotations

import torch

from dice_lsp.train.pack import IGNORE, Piece

NEVER = 1 << 40  # the trace of a pad: committed "after" every step, so always masked and never trained


def replay_piece(prompt, answer, trace, block_size: int, mask_id: int, eos_id: int, advantage: float,
                 sample: int = 0) -> Piece:
    """Row `[prompt | clean answer | noisy copies]`, one noisy copy per round holding the blocks active in it.

    Noisy copies hold whole blocks (the prompt's tail included, never masked) at the clean copy's positions;
    per trained token `extra` carries the advantage, and `weight` is 1 / answer length (the normaliser).
    """
    clean = list(prompt) + list(answer)
    steps = [-1] * len(prompt) + list(trace) + [NEVER] * (-len(clean) % block_size)
    clean += [eos_id] * (-len(clean) % block_size)
    n, start = len(clean), len(prompt)
    first = start // block_size * block_size
    rounds: list[list[tuple[int, int]]] = []  # per round: (block start, commit step)
    for lo in range(first, n, block_size):
        distinct = sorted({s for s in steps[lo : lo + block_size] if 0 <= s < NEVER})
        for r, step in enumerate(distinct):
            if r == len(rounds):
                rounds.append([])
            rounds[r].append((lo, step))
    ids, positions, copies, targets = [clean], [list(range(n))], [[0] * n], [[IGNORE] * n]
    for r, blocks in enumerate(rounds, 1):
        for lo, step in blocks:
            span = range(lo, lo + block_size)
            ids.append([mask_id if i >= start and steps[i] >= step else clean[i] for i in span])
            targets.append([clean[i] if i >= start and steps[i] == step else IGNORE for i in span])
            positions.append(list(span))
            copies.append([r] * block_size)
    flat = lambda parts: torch.tensor([x for part in parts for x in part], dtype=torch.long)  # noqa: E731
    target = flat(targets)
    trained = target != IGNORE
    weight = torch.where(trained, 1.0 / max(1, len(answer)), 0.0)
    extra = {"advantage": torch.where(trained, float(advantage), 0.0)}
    return Piece(flat(ids), flat(positions), flat(copies), target, weight, len(answer), sample, extra)


def ppo_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantage: torch.Tensor, weight: torch.Tensor,
             clip: float, kl_beta: float) -> tuple[torch.Tensor, dict]:
    """Per-token PPO clip on exp(logp - old) times the advantage, plus beta * k3 KL against the pre-update policy,
    each token weighted by 1 / its sample's answer length; summed (the caller divides by the samples)."""
    ratio = torch.exp(logp - old_logp)
    surrogate = torch.minimum(ratio * advantage, ratio.clamp(1 - clip, 1 + clip) * advantage)
    log_ratio = old_logp - logp
    k3 = torch.exp(log_ratio) - log_ratio - 1
    loss = ((-surrogate + kl_beta * k3) * weight).sum()
    stats = {"kl": float((k3 * weight).sum().detach()),
             "clipped": float(((ratio - 1).abs() > clip).float().sum().detach())}
    return loss, stats
