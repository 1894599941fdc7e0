"""How BiC-RL decodes its rollouts: the engine's decoding settings with the overrides the paper names.

Torch-free, so `dice-lsp train rl --help` shows these defaults without loading the model code.
"""

from __future__ import annotations

from dataclasses import replace

from dice_lsp.engine.settings import DecodeSettings

# Dynamic decoding at tau 0.9 (docs/ALGORITHMS.md section 4), sampled from the whole distribution (no top-k or top-p
# cut) so that a group's samples differ. Block size and stop tokens are the checkpoint's, set per run.
ROLLOUT_DECODING = replace(DecodeSettings(), strategy="dynamic", threshold=0.9, top_k=0, top_p=1.0)
