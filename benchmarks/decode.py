"""Decoding speed of the engine on a random model of DICE-1.7B's shape, against HF transformers' generate().
The HF model (a Qwen3ForCausalLM with the same weights) is also saved and decoded by the engine's causal path.

Prints a table and appends a dated section to benchmarks/RESULTS.md. Needs a CUDA GPU (about 20 GB free).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import platform
import socket
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity
from torch.profiler import profile as torch_profile

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "fixtures")]  # the checkout, and the tiny model's tokenizer

from dice_lsp.engine.checkpoint import load  # noqa: E402
from dice_lsp.engine.config import ModelConfig  # noqa: E402
from dice_lsp.engine.decode import generate  # noqa: E402
from dice_lsp.engine.fast import GraphRunner  # noqa: E402
from dice_lsp.engine.model import SDARModel  # noqa: E402
from tiny_model import train_tokenizer  # noqa: E402

DICE_1_7B = dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                 num_attention_heads=16, num_key_value_heads=8, head_dim=128, block_size=4)


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def copy_bandwidth(device, gigabytes=2.0) -> float:
    """Bytes per second moved by a device-to-device copy, counting bytes read and written."""
    src = torch.empty(int(gigabytes * 2**30) // 2, dtype=torch.bfloat16, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    return 2 * src.numel() * 2 / time_cuda(lambda: dst.copy_(src), 20)


def time_cuda(fn, repeats) -> float:
    """Mean seconds per call, by CUDA events (wall clock on a CPU, for --smoke)."""
    if not torch.cuda.is_available():
        began = time.perf_counter()
        for _ in range(repeats):
            fn()
        return (time.perf_counter() - began) / repeats
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000 / repeats


def block_forward(model, runner, prompt_len) -> dict[str, float]:
    """Latency of one graphed pass at batch 1: over a 4-token block with and without the output head, and over a
    finished block and the next (8 tokens, head on the second: what decoding runs at each block's first pass)."""
    config = model.config
    device = model.lm_head.weight.device
    prompt = torch.randint(0, config.vocab_size, (1, prompt_len), device=device)
    generate(model, prompt.tolist(), None, runner=runner, max_new_tokens=12, stop_token_ids=(), seed=0)
    valid = torch.ones((1, prompt_len + 12), dtype=torch.bool, device=device)
    runner.prefill(prompt, torch.arange(prompt_len, device=device)[None], valid, 4)  # no block's write left pending
    block = torch.full((1, 4), config.mask_token_id, device=device)
    where = torch.arange(prompt_len, prompt_len + 4, device=device)[None]
    done, done_where = prompt[:, -4:], where - 4
    passes = {"denoise": lambda: runner.denoise(block, where, prompt_len),
              "commit": lambda: runner.commit(block, where, prompt_len),
              "both": lambda: runner.commit_and_denoise(done, done_where, block, where, prompt_len)}
    for run in passes.values():  # captures its graph outside the timed calls (decoding never runs a lone commit)
        run()
    return {name: time_cuda(run, 50) for name, run in passes.items()}


def profile(model, runner, prompt_len) -> None:
    """Where a batch-1 block pass spends its time: per-kernel table of eager passes, and each linear alone."""
    if not torch.cuda.is_available():
        return

    device = model.lm_head.weight.device
    block = torch.full((1, 4), model.config.mask_token_id, device=device)
    where = torch.arange(prompt_len, prompt_len + 4, device=device)[None]
    runner.use_graphs = False
    for _ in range(3):
        runner.denoise(block, where, prompt_len)
    sync()
    eager = time_cuda(lambda: runner.denoise(block, where, prompt_len), 10)
    print(f"eager block pass: {eager * 1e3:.3f} ms")
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            runner.denoise(block, where, prompt_len)
        sync()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=18, max_name_column_width=70))
    runner.use_graphs = True
    layer = model.model.layers[0]
    x = torch.randn(1, 4, model.config.hidden_size, device=device, dtype=model.lm_head.weight.dtype)
    for name, linear in [("q_proj", layer.self_attn.q_proj), ("gate_proj", layer.mlp.gate_proj),
                         ("down_proj", layer.mlp.down_proj), ("lm_head", model.lm_head)]:
        inp = x if linear.in_features == x.shape[-1] else torch.randn(1, 4, linear.in_features, device=device,
                                                                      dtype=x.dtype)
        with torch.inference_mode():
            seconds = time_cuda(lambda: linear(inp), 50)
        nbytes = linear.weight.numel() * linear.weight.element_size()
        print(f"{name}: {seconds * 1e6:.1f} us, {nbytes / seconds / 1e12:.2f} TB/s")


def plain_residual_adds(runner: GraphRunner) -> None:
    """Each residual add of the runner's passes an elementwise kernel of its own after the product, as before the
    products added it (engine.model.add_projection). Call it before the runner's first pass, which captures graphs."""

    def add_projection(residual, x, linear):
        return residual + linear(x)

    runner.kernels = dataclasses.replace(runner.kernels, add_projection=add_projection)


def decode_speed(model, runner, batch, prompt_len, new_tokens, **settings) -> dict[str, float]:
    prompt = torch.randint(0, model.config.vocab_size, (1, prompt_len)).tolist() * batch
    args = dict(max_new_tokens=new_tokens, stop_token_ids=(), seed=0, **settings)  # random weights: no stops
    generate(model, prompt, None, runner=runner, **args)  # captures the graphs
    sync()
    began = time.perf_counter()
    out = generate(model, prompt, None, runner=runner, **args)
    seconds = time.perf_counter() - began
    tokens = sum(len(g.token_ids) for g in out)
    return {"seconds": seconds, "forwards/s": out[0].forwards / seconds, "tokens/s": tokens / seconds,
            "forwards": out[0].forwards}


def hf_model(model):
    """HF's Qwen3ForCausalLM holding the very same weights as `model` (the parameter names are the same)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM  # here: transformers takes seconds, and --no-hf skips it

    c = model.config
    hf_config = Qwen3Config(vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
                            num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
                            num_key_value_heads=c.num_key_value_heads, head_dim=c.head_dim, rope_theta=c.rope_theta,
                            tie_word_embeddings=False, max_position_embeddings=c.max_position_embeddings)
    device = model.lm_head.weight.device
    with device:
        hf = Qwen3ForCausalLM(hf_config).to(model.lm_head.weight.dtype)
    hf.load_state_dict(model.state_dict())  # same names: the very same weights
    return hf.eval()


def hf_speed(hf, batch, prompt_len, new_tokens, seed=0) -> dict[str, float]:
    device = hf.lm_head.weight.device
    prompt = torch.randint(0, hf.config.vocab_size, (1, prompt_len), generator=torch.Generator().manual_seed(seed))
    prompt = prompt.to(device).expand(batch, -1)
    args = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    with torch.inference_mode():
        hf.generate(prompt, **dict(args, max_new_tokens=4, min_new_tokens=4))
        sync()
        began = time.perf_counter()
        out = hf.generate(prompt, **args)
        sync()
    assert out.shape[1] == prompt_len + new_tokens, out.shape
    seconds = time.perf_counter() - began
    return {"seconds": seconds, "forwards/s": new_tokens / seconds, "tokens/s": batch * new_tokens / seconds,
            "forwards": new_tokens, "tokens": out[0, prompt_len:].tolist()}


def causal_speed(hf, prompt_len, new_tokens, seed=0) -> dict[str, float]:
    """The HF model saved by save_pretrained, loaded by the engine as a causal LM and decoded greedily at batch 1
    (plain runner: the CUDA-graph runner is SDAR-only), on the prompt hf_speed uses with the same seed."""
    with tempfile.TemporaryDirectory(prefix="qwen3-") as directory:
        hf.save_pretrained(directory)
        train_tokenizer().save(Path(directory))  # load needs a tokenizer; decoding here never uses it
        dtype = {torch.bfloat16: "bfloat16", torch.float32: "float32"}[hf.lm_head.weight.dtype]
        loaded = load(directory, device=str(hf.lm_head.weight.device), dtype=dtype)
    assert loaded.config.causal
    prompt = torch.randint(0, hf.config.vocab_size, (1, prompt_len), generator=torch.Generator().manual_seed(seed))
    args = dict(max_new_tokens=new_tokens, stop_token_ids=(), temperature=0)
    generate(loaded.model, prompt.tolist(), None, **dict(args, max_new_tokens=4))
    sync()
    began = time.perf_counter()
    (out,) = generate(loaded.model, prompt.tolist(), None, **args)
    seconds = time.perf_counter() - began
    return {"seconds": seconds, "forwards/s": out.forwards / seconds, "tokens/s": len(out.token_ids) / seconds,
            "forwards": out.forwards, "tokens": list(out.token_ids)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prompt", type=int, default=256, help="prompt tokens")
    parser.add_argument("--new", type=int, default=256, help="tokens to generate per sample")
    parser.add_argument("--hf-new", type=int, default=32, help="tokens HF generate() makes (it is slow)")
    parser.add_argument("--no-hf", action="store_true")
    parser.add_argument("--results", default=str(Path(__file__).with_name("RESULTS.md")))
    parser.add_argument("--profile", action="store_true", help="print where a block pass spends its time, then stop")
    parser.add_argument("--smoke", action="store_true", help="a tiny shape on any device; records nothing")
    args = parser.parse_args()
    if not torch.cuda.is_available() and not args.smoke:
        print("benchmarks/decode.py needs a CUDA GPU (or --smoke)", file=sys.stderr)
        return 2

    torch.manual_seed(0)
    shape = dict(DICE_1_7B, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, vocab_size=1000, mask_token_id=999) if args.smoke else DICE_1_7B
    config = ModelConfig(**shape)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with device:
        model = SDARModel(config).to(torch.bfloat16 if device.type == "cuda" else torch.float32)
    model.eval().requires_grad_(False)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    bandwidth = copy_bandwidth(device, 0.01 if args.smoke else 2.0)
    roofline = weight_bytes / bandwidth
    runner = GraphRunner(model)
    print(f"kernels compiled in {runner.compile_seconds} s")

    began = time.perf_counter()
    latency = block_forward(model, runner, args.prompt)
    if args.profile:
        print(f"graphed block pass {latency['denoise'] * 1e3:.3f} ms, roofline {roofline * 1e3:.3f} ms")
        profile(model, runner, args.prompt)
        return 0
    rows = [("block forward b=1, 4 tokens (with head)", f"{latency['denoise'] * 1e3:.3f} ms",
             f"{latency['denoise'] / roofline:.2f}x roofline"),
            ("block K/V write b=1 (no head)", f"{latency['commit'] * 1e3:.3f} ms",
             f"{latency['commit'] / roofline:.2f}x roofline"),
            ("K/V write + next block's pass b=1, 8 tokens (head on 4)", f"{latency['both'] * 1e3:.3f} ms",
             f"{latency['both'] / roofline:.2f}x roofline")]
    # Same run, same model: the runner's kernels against the alternatives, one change at a time, and the path of
    # the previous benchmark runs (SDPA's memory-efficient attention, PyTorch's QK-norm/RoPE/K-V writes, residual
    # adds of their own).
    variants = {"SDPA backend default": dict(attention="default"),
                "SDPA memory-efficient backend": dict(attention="efficient"),
                "QK-norm, RoPE and K/V writes by PyTorch": dict(fused_inputs=False),
                "the previous path": dict(attention="efficient", fused_inputs=False, plain_residuals=True)}
    for name, options in variants.items():
        plain = options.pop("plain_residuals", False)
        other = GraphRunner(model, **options)
        if plain:
            plain_residual_adds(other)
        seconds = block_forward(model, other, args.prompt)["denoise"]
        rows.append((f"block forward b=1, {name}", f"{seconds * 1e3:.3f} ms", f"{seconds / roofline:.2f}x roofline"))
        if name == "the previous path":
            for batch in (1, 64):
                r = decode_speed(model, other, batch, args.prompt, args.new, strategy="static", steps=4, top_k=1)
                rows.append((f"b={batch} static decoding, {name}", f"{r['tokens/s']:.0f} tok/s", "for comparison"))
        del other
    settings = {
        "static (steps 4, top_k 1)": dict(strategy="static", steps=4, top_k=1, temperature=1.0),
        "dynamic (tau 0.9, T 1, no top-k)": dict(strategy="dynamic", steps=4, threshold=0.9, top_k=0, temperature=1.0),
        "dynamic (tau 0.9, top_k 1)": dict(strategy="dynamic", steps=4, threshold=0.9, top_k=1, temperature=1.0),
    }
    speeds = []
    hf = None if args.no_hf else hf_model(model)
    for batch in (1, 4) if args.smoke else (1, 64):
        for name, kw in settings.items():
            r = decode_speed(model, runner, batch, args.prompt, args.new, **kw)
            speeds.append((f"dice-lsp b={batch} {name}", r))
        if hf is not None:
            speeds.append((f"HF generate() b={batch} greedy", hf_speed(hf, batch, args.prompt, args.hf_new)))
            if batch == 1:
                causal = causal_speed(hf, args.prompt, args.hf_new)
                same = next((i for i, (a, b) in enumerate(zip(causal["tokens"], speeds[-1][1]["tokens"])) if a != b),
                            args.hf_new)
                speeds.append((f"dice-lsp b=1 causal path on the HF-saved Qwen3, greedy "
                               f"(first {same} of {args.hf_new} tokens as HF's)", causal))
    print(f"total benchmark time {time.perf_counter() - began:.1f} s, graphs captured {runner.captures}")
    compiled = f"{runner.compile_seconds:.0f} s" if runner.compile_seconds is not None else "not compiled"

    device = torch.cuda.get_device_name() if device.type == "cuda" else "CPU"
    lines = [f"weights {weight_bytes / 1e9:.2f} GB, copy bandwidth {bandwidth / 1e12:.2f} TB/s, "
             f"roofline (weights / bandwidth) {roofline * 1e3:.3f} ms; CUDA graphs; "
             f"torch.compile of elementwise kernels: {compiled}",
             "", "| measure | value | note |", "| --- | --- | --- |"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    lines += ["", f"prompt {args.prompt} tokens, {args.new} new tokens per sample (HF: {args.hf_new}), stops off",
              "", "| decoder | forwards/s | tokens/s | forwards | seconds |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {n} | {r['forwards/s']:.0f} | {r['tokens/s']:.0f} | {r['forwards']} | {r['seconds']:.2f} |"
              for n, r in speeds]
    table = "\n".join(lines)
    print(table)
    if args.smoke:
        return 0
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    header = (f"\n## engine decode, {stamp}, {device} on {socket.gethostname()}\n\n"
              f"benchmarks/decode.py: random DICE-1.7B-shaped SDAR model, bf16, torch {torch.__version__}, "
              f"Python {platform.python_version()}\n\n")
    path = Path(args.results)
    if not path.exists():
        path.write_text("# Benchmark results\n\nEach section is appended by the benchmark that measured it.\n")
    with path.open("a") as f:
        f.write(header + table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
