"""The fast path (static KV cache, CUDA graphs) decodes exactly what the reference decoder does."""

from __future__ import annotations

import pytest
import torch

from dice_lsp.engine import model as model_code
from dice_lsp.engine.checkpoint import load, save
from dice_lsp.engine.config import ModelConfig
from dice_lsp.engine.decode import CacheRunner, generate
from dice_lsp.engine.fast import GraphRunner, compile_kernels, fuse_projections
from dice_lsp.engine.model import SDARModel

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
        logits, both = [], []
        for runner in (CacheRunner(model), GraphRunner(model)):
            runner.prefill(tokens[:, :36], positions[:, :36], valid, 4)
            logits.append(runner.denoise(tokens[:, 36:], positions[:, 36:], 36).float().clone())
            runner.prefill(tokens[:, :32], positions[:, :32], valid, 4)  # block 32:36 finished, 36:40 next
            both.append(runner.commit_and_denoise(tokens[:, 32:36], positions[:, 32:36], tokens[:, 36:],
                                                  positions[:, 36:], 36).float().clone())
    torch.testing.assert_close(logits[1], logits[0], atol=3e-2, rtol=3e-2)
    torch.testing.assert_close(both[0], logits[0], atol=3e-2, rtol=3e-2)
    torch.testing.assert_close(both[1], logits[0], atol=3e-2, rtol=3e-2)


@pytest.mark.gpu
def test_compiled_kernels_match_eager_math_and_change_nothing_else():
    kernels = compile_kernels()
    assert kernels is not None and compile_kernels() is kernels, "compiled once per process"
    assert model_code.EAGER == model_code.Kernels(), "the model's own kernels stay eager"
    x = torch.randn(3, 4, 8, 128, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(128, device="cuda", dtype=torch.bfloat16) + 0.5
    cos, sin = torch.randn(2, 3, 4, 128, device="cuda", dtype=torch.bfloat16)
    close = dict(atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(kernels.rms_norm(x, w, 1e-6), model_code.rms_norm(x, w, 1e-6), **close)
    for a, b in zip(kernels.qk_norm_rotary(x, x, w, w, cos, sin, 1e-6),
                    model_code.qk_norm_rotary(x, x, w, w, cos, sin, 1e-6)):
        torch.testing.assert_close(a, b, **close)
    torch.testing.assert_close(kernels.swiglu(x, x), model_code.swiglu(x, x), **close)


def test_fused_projections_change_nothing_and_keep_training_on_the_parameters(tiny_model_dir, tmp_path):
    loaded = load(str(tiny_model_dir), device="cpu")
    ids = torch.tensor([loaded.tokenizer.encode("__global__ void add(float* a)")])
    with torch.no_grad():
        before = loaded.model(ids)
    fuse_projections(loaded.model)
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(ids), before)
    loaded.model.requires_grad_(True)
    loaded.model(ids).sum().backward()
    assert loaded.model.model.layers[0].self_attn.k_proj.weight.grad is not None
    again = load(str(save(loaded.model, loaded, tmp_path / "saved")), device="cpu")
    with torch.no_grad():
        torch.testing.assert_close(again.model(ids), before)
