"""Training DICE models: block-diffusion SFT, BiC-RL (TraceRL replay) and data curation, on one GPU or many.

Entry points: `sft.train`, `rl.train` and `curate.curate`; `TrainError` is the package's one error type.
"""

from __future__ import annotations

from dice_lsp.train.errors import TrainError

__all__ = ["TrainError"]
