"""The fast path (static KV cache, CUDA graphs) decodes exactly what the reference decoder does."""

from __future__ import annotations

import pytest
import torch

from engine.checkpoint import load
from engine.config import ModelConfig
from engine.decode import CacheRunner, generate
from engine.fast import GraphRunner
from engine.model import SDARModel

CASES = {
    "static greedy": dict(temperature=0),
    "dynamic greedy": dict(temperature=0, strategy="dynamic", threshold=0.12),
    "sampled": dict(temperature=1.0, top_k=0, top_p=0.95, seed=3),
    "block 8, 3 steps": dict(temperature=0, block_size=8, steps=3),
}


def check_same(loaded, runner):
    prompt = loaded.tokenizer.encode("<|im_start|>user\nfuse a softmax<|im_end|>\n<|im_start|>assistant\n")
    for name, args in CASES.items():
        for prompts in ([prompt], [prompt, prompt[:6], prompt[:1]], [prompt] * 3):
            args = dict(args, max_new_tokens=300, stop_token_ids=())  # past one cache bucket (256)
            reference = generate(loaded.model, prompts, None, **args)
            fast = generate(loaded.model, prompts, None, runner=runner, **args)
            for a, b in zip(reference, fast):
                assert (a.token_ids, a.trace) == (b.token_ids, b.trace), name


def test_static_cache_equals_reference_on_cpu(tiny_model_dir):
    loaded = load(str(tiny_model_dir), device="cpu")
    check_same(loaded, GraphRunner(loaded.model))


@pytest.mark.gpu
def test_cuda_graphs_equal_reference_on_gpu(tiny_model_dir):
    loaded = load(str(tiny_model_dir), device="cuda", dtype="float32")
    runner = GraphRunner(loaded.model)
    check_same(loaded, runner)
    assert runner.captures > 2


@pytest.mark.gpu
def test_bf16_graph_pass_matches_reference_pass():
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=1000, hidden_size=512, intermediate_size=1024, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=4, head_dim=64, mask_token_id=999)
    with torch.device("cuda"):
        model = SDARModel(config).to(torch.bfloat16).eval()
    tokens = torch.randint(0, 999, (2, 40), device="cuda")
    tokens[:, 36:] = 999
    valid = torch.ones(2, 40, dtype=torch.bool, device="cuda")
    positions = torch.arange(40, device="cuda")[None].expand(2, -1)
    with torch.inference_mode():
        logits = []
        for runner in (CacheRunner(model), GraphRunner(model)):
            runner.prefill(tokens[:, :36], positions[:, :36], valid, 4)
            logits.append(runner.denoise(tokens[:, 36:], positions[:, 36:], 36).float().clone())
    torch.testing.assert_close(logits[1], logits[0], atol=3e-2, rtol=3e-2)
