"""A run's checkpoints: the model in the HF layout the engine loads, with the trainer's state beside it to resume.

`<out>/checkpoints/step-N/` is written under a temporary name and renamed when complete; `<out>/latest` names it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from dice_lsp.engine.checkpoint import DTYPES, save
from dice_lsp.train.errors import TrainError

TRAINER = "trainer"  # the sub-directory with optimizer, scheduler, RNG and data position


class Weights:
    """What engine.checkpoint.save reads from a model (its config and state dict), for merged or gathered weights."""

    def __init__(self, config, state: dict[str, torch.Tensor]):
        self.config = config
        self.state = state

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.state


def merge_lora(state: dict[str, torch.Tensor], scaling: float) -> dict[str, torch.Tensor]:
    """The plain SDAR state dict of a LoRA-injected model: W + B @ A * scaling, adapters dropped."""
    merged = {}
    for name, tensor in state.items():
        if ".lora_" in name:
            continue
        if name.endswith(".base_layer.weight"):
            stem = name[: -len(".base_layer.weight")]
            a, b = state[f"{stem}.lora_A.default.weight"], state[f"{stem}.lora_B.default.weight"]
            tensor = (tensor.float() + (b.float() @ a.float()) * scaling).to(tensor.dtype)
            name = f"{stem}.weight"
        merged[name] = tensor
    return merged


def adapter_of(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.contiguous() for k, v in state.items() if ".lora_" in k}


def latest(out_dir) -> Path | None:
    """The newest complete checkpoint of a run, or None."""
    pointer = Path(out_dir) / "latest"
    if not pointer.is_file():
        return None
    path = Path(out_dir) / pointer.read_text().strip()
    if not (path / TRAINER / "state.json").is_file():
        raise TrainError(f"{pointer} names {path}, which is incomplete; delete {pointer} to start over")
    return path


def staging_dir(out_dir, step: int) -> Path:
    return Path(out_dir) / "checkpoints" / f".step-{step:07d}.partial"


def write_model(out_dir, step: int, config, state, tokenizer) -> Path:
    """Rank 0: the HF-layout part of checkpoint `step`, under its staging name."""
    staging = staging_dir(out_dir, step)
    shutil.rmtree(staging, ignore_errors=True)
    save(Weights(config, state), tokenizer, staging)
    (staging / TRAINER).mkdir()
    return staging


def write_trainer(staging: Path, rank: int, files: dict[str, object]) -> None:
    """Each rank's trainer files (torch objects, or dicts of tensors saved as safetensors, or JSON for .json)."""
    for name, value in files.items():
        target = staging / TRAINER / name.format(rank=rank)
        if name.endswith(".json"):
            target.write_text(json.dumps(value, indent=2) + "\n")
        elif name.endswith(".safetensors"):
            save_file(value, str(target))
        else:
            torch.save(value, target)


def publish(out_dir, step: int, keep: int) -> Path:
    """Rank 0: rename the staged checkpoint into place, point `latest` at it, prune old ones."""
    out_dir = Path(out_dir)
    final = out_dir / "checkpoints" / f"step-{step:07d}"
    shutil.rmtree(final, ignore_errors=True)
    os.replace(staging_dir(out_dir, step), final)
    pointer = out_dir / ".latest.tmp"
    pointer.write_text(str(final.relative_to(out_dir)) + "\n")
    os.replace(pointer, out_dir / "latest")
    done = sorted(p for p in (out_dir / "checkpoints").glob("step-*") if p.is_dir())
    for old in done[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def read_trainer(path: Path, name: str, rank: int = 0):
    target = Path(path) / TRAINER / name.format(rank=rank)
    if not target.exists():
        raise TrainError(f"{target} is missing: the checkpoint was written by a different setup "
                         "(world size, LoRA); resume with the same command, or delete <out>/latest to start over")
    if name.endswith(".json"):
        return json.loads(target.read_text())
    if name.endswith(".safetensors"):
        return load_file(str(target))
    return torch.load(target, map_location="cpu", weights_only=False)


def export(out_dir, config, state, tokenizer, dtype: str | None = None) -> Path:
    """The run's result, `<out>/final`, in the checkpoint's own dtype (what `dice-lsp generate` should load)."""
    if dtype in DTYPES:
        state = {k: v.to(DTYPES[dtype]) if v.is_floating_point() else v for k, v in state.items()}
    return save(Weights(config, state), tokenizer, Path(out_dir) / "final")
