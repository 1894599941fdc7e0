'''A tiny random SDAR checkpoint in the HF layout, with a byte-level BPE tokenizer trained here on built-in text.

Tests of every package decode with it; it is also the starting point of the bundled model's training.
'''

from __future__ import annotations

from pathlib import Path

import torch
from engine import prompts
from engine.checkpoint import save
from engine.config import ModelConfig
from engine.model import SDARModel
from engine.tokenizer import SPECIAL_TOKENS, Tokenizer
from engine.tokenizer import train as train_bpe

CORPUS = r'''
__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (; i < n; i += blockDim.x * gridDim.x) {
        y[i] = fmaxf(x[i], 0.0f);
    }
}

__global__ void softmax_kernel(const float* x, float* y, int rows, int cols) {
    extern __shared__ float shared[];
    int row = blockIdx.x;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, x[row * cols + j]);
    shared[threadIdx.x] = m;
    __syncthreads();
}

class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))

batch_size = 128
dim = 16384
x = torch.randn(batch_size, dim, device="cuda", dtype=torch.float32)
torch.cuda.synchronize()
TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
dim3 grid((n + 255) / 256);
dim3 block(256);
cudaError_t err = cudaGetLastError();
You write custom CUDA kernels to replace the PyTorch operators in the given architecture to get speedups.
Optimize the architecture named Model with custom CUDA operators! Name your optimized output architecture ModelNew.
Output the new code in codeblocks. Please generate real code, NOT pseudocode, make sure the code compiles and is fully functional.
```python
```
'''


def train_tokenizer(vocab_size: int = 512) -> Tokenizer:
    """A byte-level BPE (so any text encodes) with Qwen's special tokens and chat template."""
    # The one-shot example is in every end-to-end prompt, so the tokenizer learns it too.
    return train_bpe([CORPUS, prompts.EXAMPLE_REFERENCE, prompts.EXAMPLE_SOLUTION] * 4, vocab_size)


def tiny_config(tokenizer: Tokenizer, **overrides) -> ModelConfig:
    ids = {token: tokenizer.token_id(token) for token in SPECIAL_TOKENS}
    shape = dict(
        vocab_size=tokenizer.vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=4096,
        block_size=4,
        mask_token_id=ids["<|MASK|>"],
        eos_token_id=ids["<|endoftext|>"],
        stop_token_ids=(ids["<|endoftext|>"], ids["<|im_end|>"]),
        torch_dtype="float32",
    )
    shape.update(overrides)
    return ModelConfig(**shape)


def build(out_dir, seed: int = 0, max_shard_bytes: int | None = None, **overrides) -> Path:
    """Write a tiny random checkpoint to `out_dir` (same seed, same weights) and return its path."""
    tokenizer = train_tokenizer()
    config = tiny_config(tokenizer, **overrides)
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = SDARModel(config)
        # Larger weights than the 0.02 init make the random model's predictions peaked, so confidence-based
        # decoding commits tokens in varied orders and the tests see both static and dynamic behaviour.
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "norm" not in name:
                    param.normal_(0.0, 0.25 if "embed" in name or "lm_head" in name else 0.12)
    finally:
        torch.random.set_rng_state(generator_state)
    return save(model, tokenizer, out_dir, max_shard_bytes=max_shard_bytes)
