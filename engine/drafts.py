"""From a reference file to candidate solutions: the prompt (one-shot, or infilling of a skeleton, in the checkpoint's
prompt template or ours), one batch of samples, and each sample's first code block (spliced into the skeleton for
infill) as a `Draft`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Callable

import torch

from dice_lsp.engine import prompts, templates
from dice_lsp.engine.checkpoint import Loaded
from dice_lsp.engine.decode import generate
from dice_lsp.engine.errors import EngineError
from dice_lsp.engine.generation import DecodeProgress, Draft, Generation
from dice_lsp.engine.settings import DecodeSettings


def generate_kernel(
    reference_text: str,
    loaded: Loaded,
    settings=None,
    samples: int = 1,
    infill_skeleton: str | None = None,
    on_block: Callable[[DecodeProgress], None] | None = None,
    cancel: Callable[[], bool] | None = None,
    **overrides,
) -> list[Draft]:
    """`samples` candidate solutions for the reference file, each a Draft (the Generation and the code or why not).

    settings: dice_lsp.settings.Decoding, DecodeSettings or None; keyword overrides win (seed=, max_new_tokens=).
    """
    if samples < 1:
        raise EngineError(f"samples must be >= 1, got {samples}")
    template = templates.template_for(_setting(settings, overrides, "prompt_template"), loaded.template,
                                      prompts.BUILT_IN)
    if infill_skeleton is not None:
        prefix, _, suffix = prompts.skeleton_parts(infill_skeleton)
        messages = prompts.infill_prompt(reference_text, prefix, suffix, template)
    else:
        messages = prompts.end_to_end_prompt(reference_text, template)
    given = template.answer_prefix if _setting(settings, overrides, "given_prefix") else ""
    # Encoded apart from the prompt, as training encodes the answer apart from it: the same tokens as in training.
    prompt_ids = loaded.tokenizer.encode(prompts.render(messages, loaded.chat_template))
    prompt_ids += loaded.tokenizer.encode(given) if given else []
    with decoding_threads(loaded):
        generations = generate(loaded.model, [prompt_ids] * samples, settings, on_block, cancel,
                               tokenizer=loaded.tokenizer, runner=runner_for(loaded), **overrides)
    return [draft(g, infill_skeleton, given) for g in generations]


def _setting(settings, overrides: dict, name: str):
    """A setting of generate_kernel's: the override, else the settings object's, else DecodeSettings' default."""
    return overrides.get(name, getattr(settings, name, getattr(DecodeSettings, name)))


def runner_for(loaded: Loaded):
    """One GraphRunner per loaded SDAR model on a GPU (graphs and cache are reused); else None: the plain runner."""
    if loaded.device.type != "cuda" or loaded.config.causal:  # the graph runner decodes blocks, not causal LMs
        return None
    if loaded.runner is None:
        # Imported here: engine.fast brings Triton and its kernels (about 0.4 s more), which only a GPU runs.
        from dice_lsp.engine.fast import GraphRunner

        loaded.runner = GraphRunner(loaded.model)
    return loaded.runner


# A model with fewer weights than this decodes on one CPU thread. Each pass of a 4-token block is a few dozen matrix
# products of a few MFLOP (the bundled 15.7 M model: about 0.13 GFLOP a pass), too small for intra-op threads to pay
# for their synchronisation; and where the cores are busy, every parallel region waits for a descheduled thread. On
# the shared 2-core machine (load 8) the bundled model wrote 64 tokens of an infill in 54 s on torch's 2 threads and
# in 3.4 s on one; its whole infill (535 tokens) took 559 s. A model of DICE's size (1.7 B and up) keeps torch's
# threads: its products are large enough to share out.
ONE_THREAD_BELOW = 100_000_000


@contextmanager
def decoding_threads(loaded: Loaded) -> Iterator[None]:
    """Decode a small model (ONE_THREAD_BELOW) on the CPU with one intra-op thread, then give torch its count back."""
    before = torch.get_num_threads()
    small = sum(weight.numel() for weight in loaded.model.parameters()) < ONE_THREAD_BELOW
    if loaded.device.type != "cpu" or not small or before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def draft(generation: Generation, skeleton: str | None, given: str = "") -> Draft:
    """The generation as a kernel file: its first code block, for infill spliced into the skeleton; or why not.
    `given` is the start of the reply that the model was given rather than wrote (the template's answer prefix)."""
    code = prompts.extract_code(given + generation.text)
    if code is None:
        return Draft(generation, None, f"no code block in the output ({generation.stop_reason})")
    if skeleton is None:
        return Draft(generation, code)
    try:
        return Draft(generation, prompts.splice(skeleton, code), "core spliced into the skeleton")
    except EngineError as error:
        return Draft(generation, None, str(error))
