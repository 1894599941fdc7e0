"""GPU checks of the training fast path: FlexAttention with the block mask equals the plain SDPA path."""

from __future__ import annotations

import pytest
import torch

from dice_lsp.engine.config import ModelConfig
from dice_lsp.engine.model import SDARModel
from dice_lsp.train.objective import Objective
from dice_lsp.train.pack import group, join, stack
from dice_lsp.train.sft import sample_generator, sft_piece

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_flex_attention_matches_sdpa():
    config = ModelConfig(vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=64, mask_token_id=1000,
                         eos_token_id=1001)
    torch.manual_seed(0)
    model = SDARModel(config).cuda()
    generator = torch.Generator().manual_seed(0)
    pieces = []
    for i, (p, a) in enumerate([(30, 97), (5, 60), (71, 200), (12, 33)]):
        ids = torch.randint(0, 1000, (p + a,), generator=generator).tolist()
        pieces.append(sft_piece(ids[:p], ids[p:], 4, 1000, 1001, sample_generator(0, 0, i), i))
    row = stack([join(g, 1024, 1001) for g in group(pieces, 1024)]).to("cuda")
    results = []
    for attention in ("sdpa", "flex"):
        objective = Objective(model, attention)
        model.zero_grad()
        ce = objective(row.input_ids, row.position, objective.mask(row), row.target)
        ce.sum().backward()
        results.append((ce.detach(), model.model.layers[0].self_attn.q_proj.weight.grad.clone()))
    torch.testing.assert_close(results[0][0], results[1][0], atol=2e-4, rtol=2e-4)
    torch.testing.assert_close(results[0][1], results[1][1], atol=2e-4, rtol=2e-3)
