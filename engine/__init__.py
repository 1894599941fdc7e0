"""The engine writes kernels: it loads DICE/SDAR checkpoints natively and decodes them by block diffusion.

Public API (what the server, the CLI, eval and training call):
    load(model_ref, device="auto", dtype="auto") -> Loaded         checkpoint.py: a directory or a cached hub id
    save(model, tokenizer, out_dir)                                  checkpoint.py: the same HF layout, atomically
    generate(model, prompt_ids, settings, on_block, cancel)          decode.py: token-level decoding of a batch
    generate_kernel(reference, loaded, settings, samples, infill_skeleton, on_block, cancel) -> list[Draft]
        builds the prompt (KernelBench one-shot, or DICE infilling when a skeleton is given), decodes `samples`
        samples in one batch (CUDA graphs on a GPU), extracts the first code block and, for infill, splices its
        core into the skeleton with the skeleton's prefix and suffix kept byte for byte.
"""

from __future__ import annotations

from typing import Callable

from dice_lsp.engine.checkpoint import Loaded, load, save
from dice_lsp.engine.config import ModelConfig
from dice_lsp.engine.decode import DecodeSettings, generate
from dice_lsp.engine.errors import EngineError
from dice_lsp.engine.generation import Draft, Generation, Progress
from dice_lsp.engine.model import SDARModel

__all__ = [
    "DecodeSettings", "Draft", "EngineError", "Generation", "Loaded", "ModelConfig", "Progress", "SDARModel",
    "generate", "generate_kernel", "load", "save",
]


def generate_kernel(
    reference_text: str,
    loaded: Loaded,
    settings=None,
    samples: int = 1,
    infill_skeleton: str | None = None,
    on_block: Callable[[Progress], None] | None = None,
    cancel: Callable[[], bool] | None = None,
    **overrides,
) -> list[Draft]:
    """`samples` candidate solutions for the reference file, each a Draft (the Generation and the code or why not).

    settings: dice_lsp.settings.Decoding, DecodeSettings or None; keyword overrides win (seed=, max_new_tokens=).
    """
    from dice_lsp.engine import prompts

    if samples < 1:
        raise EngineError(f"samples must be >= 1, got {samples}")
    if infill_skeleton is not None:
        prefix, _, suffix = prompts.skeleton_parts(infill_skeleton)
        messages = prompts.infill_prompt(reference_text, prefix, suffix)
    else:
        messages = prompts.end_to_end_prompt(reference_text)
    prompt_ids = loaded.tokenizer.encode(prompts.render(messages, loaded.chat_template))
    generations = generate(loaded.model, [prompt_ids] * samples, settings, on_block, cancel,
                           tokenizer=loaded.tokenizer, runner=_runner(loaded), **overrides)
    return [_draft(g, infill_skeleton) for g in generations]


def _runner(loaded: Loaded):
    """One GraphRunner per loaded SDAR model on a GPU (graphs and cache are reused); else the plain runner."""
    if loaded.device.type != "cuda" or loaded.config.causal:  # the graph runner decodes blocks, not causal LMs
        return None
    if loaded.runner is None:
        from dice_lsp.engine.fast import GraphRunner

        loaded.runner = GraphRunner(loaded.model)
    return loaded.runner


def _draft(generation: Generation, skeleton: str | None) -> Draft:
    from dice_lsp.engine import prompts

    code = prompts.extract_code(generation.text)
    if code is None:
        return Draft(generation, None, f"no code block in the output ({generation.stop_reason})")
    if skeleton is None:
        return Draft(generation, code)
    try:
        return Draft(generation, prompts.splice(skeleton, code), "core spliced into the skeleton")
    except EngineError as error:
        return Draft(generation, None, str(error))
