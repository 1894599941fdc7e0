"""The SFT objective against naive constructions: the 3-rule mask, the noising and the loss, token by token."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dice_lsp.engine.config import ModelConfig
from dice_lsp.engine.model import SDARModel
from dice_lsp.train.mask import dense_mask
from dice_lsp.train.objective import Objective
from dice_lsp.train.pack import IGNORE, group, join
from dice_lsp.train.sft import sample_generator, sft_loss, sft_piece

MASK, EOS = 60, 61


def naive_mask(segment, copy, position, block_size):
    """Loop over every (query, key) pair and apply docs/ALGORITHMS.md section 3's rules as written."""
    n = len(segment)
    out = torch.zeros(n, n, dtype=torch.bool)
    for q in range(n):
        for k in range(n):
            if segment[q] != segment[k]:
                continue
            bq, bk = position[q] // block_size, position[k] // block_size
            noisy_q, noisy_k = copy[q] == 1, copy[k] == 1
            same_copy_same_block = noisy_q == noisy_k and bq == bk
            noisy_to_clean_earlier = noisy_q and not noisy_k and bk < bq
            clean_causal = not noisy_q and not noisy_k and bk <= bq
            out[q, k] = same_copy_same_block or noisy_to_clean_earlier or clean_causal
    return out


def small_model() -> SDARModel:
    torch.manual_seed(0)
    return SDARModel(ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, head_dim=8, block_size=4,
                                 mask_token_id=MASK, eos_token_id=EOS, torch_dtype="float32"))


def toy_row(block_size=4, lengths=((5, 9), (3, 6), (8, 4))):
    generator = torch.Generator().manual_seed(1)
    pieces = []
    for i, (p, a) in enumerate(lengths):
        ids = torch.randint(0, 50, (p + a,), generator=generator).tolist()
        pieces.append(sft_piece(ids[:p], ids[p:], block_size, MASK, EOS, sample_generator(3, 0, i), i))
    return pieces, join(pieces)


def test_mask_equals_naive_construction():
    for block_size in (1, 2, 4):
        _, row = toy_row(block_size)
        got = dense_mask(row.segment, row.copy, row.position, block_size)[0, 0]
        want = naive_mask(row.segment[0].tolist(), row.copy[0].tolist(), row.position[0].tolist(), block_size)
        assert torch.equal(got, want)


def test_noising_follows_the_rules():
    for seed in range(50):
        prompt, answer = list(range(7)), list(range(10, 23))
        piece = sft_piece(prompt, answer, 4, MASK, EOS, sample_generator(seed, 0, 0), trim=False)
        n = len(piece) // 2
        assert n % 4 == 0 and n >= len(prompt) + len(answer)
        xt, x0 = piece.input_ids[:n], piece.input_ids[n:]
        assert x0.tolist() == prompt + answer + [EOS] * (n - 20)  # EOS pads to a block multiple
        assert torch.equal(piece.position[:n], piece.position[n:])  # both copies share position ids
        masked = xt == MASK
        assert not masked[: len(prompt)].any() and masked.sum() >= 1  # prompt never, at least one answer token
        assert torch.equal(piece.target[:n][masked], x0[masked]) and (piece.target[n:] == IGNORE).all()
        p = 1 / piece.weight[:n][masked][0]
        assert torch.allclose(piece.weight[:n][masked], 1 / p) and 1e-3 <= p <= 1
        assert piece.answer_tokens == n - len(prompt)


def test_loss_equals_naive_per_token_computation():
    model = small_model()
    pieces, _ = toy_row()
    objective = Objective(model, "sdpa", ce_chunk=5)
    answer_tokens = sum(p.answer_tokens for p in pieces)
    rows = [join(g) for g in group(pieces, 60)]
    assert len(rows) > 1
    packed = sum(sft_loss(objective(r.input_ids, r.position, objective.mask(r), r.target),
                          r.weight[r.target != IGNORE], answer_tokens) for r in rows)
    # Naive: each sample alone, full logits, one token at a time.
    naive = 0.0
    for piece in pieces:
        row = join([piece])
        logits = model(row.input_ids, row.position, objective.mask(row))[0]
        for i in range(len(piece)):
            if piece.target[i] != IGNORE:
                ce = F.cross_entropy(logits[i][None], piece.target[i][None])
                naive = naive + ce * piece.weight[i]
    torch.testing.assert_close(packed, naive / answer_tokens, atol=1e-5, rtol=1e-5)


def test_trimmed_noisy_copy_starts_at_the_first_answer_block():
    prompt, answer = list(range(7)), list(range(10, 23))
    full = sft_piece(prompt, answer, 4, MASK, EOS, sample_generator(5, 0, 0), trim=False)
    trimmed = sft_piece(prompt, answer, 4, MASK, EOS, sample_generator(5, 0, 0))
    n = len(full) // 2
    assert len(trimmed) == 2 * n - 4  # the one block that is prompt only (positions 0-3) is gone
    assert trimmed.position[:n - 4].tolist() == list(range(4, n)) and trimmed.copy[:n - 4].eq(1).all()
    assert torch.equal(trimmed.input_ids[:n - 4], full.input_ids[4:n])
    assert torch.equal(trimmed.target[:n - 4], full.target[4:n]) and torch.equal(trimmed.input_ids[n - 4:],
                                                                                     full.input_ids[n:])


def test_trimming_the_noisy_prompt_leaves_loss_and_gradients_unchanged():
    model = small_model()
    objective = Objective(model, "sdpa")
    results = []
    for trim in (False, True):
        pieces = []
        for i, (p, a) in enumerate(((13, 9), (3, 6), (21, 5))):
            ids = torch.randint(0, 50, (p + a,), generator=torch.Generator().manual_seed(i)).tolist()
            pieces.append(sft_piece(ids[:p], ids[p:], 4, MASK, EOS, sample_generator(3, 0, i), i, trim=trim))
        row = join(pieces)
        model.zero_grad()
        loss = sft_loss(objective(row.input_ids, row.position, objective.mask(row), row.target),
                        row.weight[row.target != IGNORE], sum(p.answer_tokens for p in pieces))
        loss.backward()
        results.append((row.tokens, loss.detach(), [q.grad.clone() for q in model.parameters()]))
    (full_tokens, full_loss, full_grads), (trim_tokens, trim_loss, trim_grads) = results
    assert trim_tokens == full_tokens - 4 * (3 + 0 + 5)  # whole prompt-only blocks of the noisy copies
    torch.testing.assert_close(trim_loss, full_loss, atol=1e-6, rtol=1e-6)
    for a, b in zip(trim_grads, full_grads):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
