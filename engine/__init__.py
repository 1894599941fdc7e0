"""The engine writes kernels: it loads DICE/SDAR checkpoints natively and decodes them by block diffusion.

Public API (what the server, the CLI, eval and training call):
    load(model_ref, device="auto", dtype="auto") -> Loaded         checkpoint.py: a directory or a cached hub id
    save(model, tokenizer, out_dir)                                  checkpoint.py: the same HF layout, atomically
    generate(model, prompt_ids, settings, on_block, cancel)          decode.py: token-level decoding of a batch
    generate_kernel(reference, loaded, settings, samples, infill_skeleton, on_block, cancel) -> list[Draft]
        drafts.py: builds the prompt (KernelBench one-shot, or DICE infilling when a skeleton is given), decodes
        `samples` samples in one batch (CUDA graphs on a GPU), extracts the first code block and, for infill,
        splices its core into the skeleton with the skeleton's prefix and suffix kept byte for byte.
    DecodeSettings                                                   settings.py: the decoding defaults (no torch)

The names are exported lazily (PEP 562): importing a torch-free module such as dice_lsp.engine.settings or
dice_lsp.engine.errors does not load torch; the first use of `load`, `generate`, ... imports the module that owns it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what the lazy exports are, for type checkers and editors
    from dice_lsp.engine.checkpoint import Loaded, load, save
    from dice_lsp.engine.config import ModelConfig
    from dice_lsp.engine.decode import generate
    from dice_lsp.engine.drafts import generate_kernel
    from dice_lsp.engine.errors import EngineError
    from dice_lsp.engine.generation import DecodeProgress, Draft, Generation
    from dice_lsp.engine.model import SDARModel
    from dice_lsp.engine.settings import DecodeSettings

_OWNERS = {  # exported name -> the module that defines it
    "DecodeProgress": "generation", "DecodeSettings": "settings", "Draft": "generation", "EngineError": "errors",
    "Generation": "generation", "Loaded": "checkpoint", "ModelConfig": "config", "SDARModel": "model",
    "generate": "decode", "generate_kernel": "drafts", "load": "checkpoint", "save": "checkpoint",
}

__all__ = sorted(_OWNERS)


def __getattr__(name: str):
    owner = _OWNERS.get(name)
    if owner is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{owner}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_OWNERS))
