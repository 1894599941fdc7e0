"""Loading and saving checkpoints in the HF layout (config.json, safetensors, tokenizer.json), offline.

`load` takes a directory or a hub id found in the local HF cache; `save` writes the same layout atomically.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from dice_lsp.engine.config import ModelConfig, read_json
from dice_lsp.engine.errors import EngineError
from dice_lsp.engine.model import SDARModel
from dice_lsp.engine.templates import PromptTemplate, checkpoint_template
from dice_lsp.engine.tokenizer import Tokenizer

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
INDEX = "model.safetensors.index.json"


@dataclass
class Loaded:
    """A checkpoint ready to decode: the model (eval mode, on its device), its tokenizer and where it came from."""

    model: SDARModel
    tokenizer: Tokenizer
    config: ModelConfig
    path: Path
    runner: Any = field(default=None, repr=False, compare=False)  # engine.fast.GraphRunner, made on first use
    template: PromptTemplate | None = None  # its own prompt template (prompt_template.json), None: it has none

    @property
    def chat_template(self) -> str | None:
        return self.tokenizer.chat_template

    @property
    def device(self) -> torch.device:
        return self.model.lm_head.weight.device


BUNDLED = Path(__file__).resolve().parent / "bundled"  # the small default model shipped in the package
# Overrides the model used when none is configured: a directory or cached hub id, or "none" to require one.
DEFAULT_MODEL_ENV = "DICE_LSP_DEFAULT_MODEL"


def default_model() -> str | None:
    """The model used when none is configured: $DICE_LSP_DEFAULT_MODEL, else the bundled one; None if neither."""
    chosen = os.environ.get(DEFAULT_MODEL_ENV, "").strip()
    if chosen:
        return None if chosen.lower() == "none" else chosen
    return str(BUNDLED) if (BUNDLED / "config.json").is_file() else None


def choose(model_ref: str | None) -> str:
    """The model to load: `model_ref`, else the default model, else an EngineError saying how to get one."""
    if model_ref:
        return model_ref
    default = default_model()
    if default is not None:
        return default
    raise EngineError(
        "no model: none is configured and no default model is installed. Set dice.model (or pass --model) to a "
        "DICE/SDAR checkpoint "
        "directory or a hub id already in the local Hugging Face cache; to get one, run `huggingface-cli download "
        "DeadlyKitt3n/DICE-1.7B` on a machine with internet and point dice.model at it")


def resolve(model_ref: str) -> Path:
    """The checkpoint directory for a local path or a hub id (`owner/name`) in the local HF cache."""
    path = Path(model_ref).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise EngineError(f"{model_ref} is a file; give the checkpoint's directory (the one holding config.json)")
    if model_ref.count("/") != 1 or model_ref.startswith((".", "/", "~")):
        raise EngineError(f"no checkpoint directory {model_ref}; give a directory or a hub id like owner/name")
    snapshot = _cached_snapshot(model_ref)
    if snapshot is not None:
        return snapshot
    raise EngineError(
        f"{model_ref} is not in the local Hugging Face cache ({_hub_cache()}); dice-lsp never downloads. On a "
        f"machine with internet run `huggingface-cli download {model_ref}` (or `huggingface-cli download "
        f"{model_ref} --local-dir DIR`), then point dice.model at the directory"
    )


def _hub_cache() -> Path:
    """Where the Hugging Face cache is now: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub. Read at
    each call (huggingface_hub reads its own at import, before a test or the editor's environment can set it)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def _cached_snapshot(model_ref: str) -> Path | None:
    """The snapshot of `model_ref` that the cache's main ref names, found the way huggingface_hub finds it, without
    any network (local_files_only); None when it is not cached or holds no config.json."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        snapshot = Path(snapshot_download(model_ref, cache_dir=_hub_cache(), local_files_only=True))
    except (LocalEntryNotFoundError, ValueError, OSError):
        return None
    return snapshot if (snapshot / "config.json").is_file() else None


def load_device(device: str = "auto") -> torch.device:
    """The device a checkpoint loads onto: "auto" is the GPU where PyTorch sees one, else the CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise EngineError(f"device {device} asked for, but PyTorch sees no CUDA GPU; set dice.device to cpu or auto")
    return torch.device(device)


def load_dtype(dtype: str, config: ModelConfig, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        # CPUs are slow and inexact in half precision; GPUs run the checkpoint's own dtype.
        return torch.float32 if device.type == "cpu" else DTYPES.get(config.torch_dtype, torch.bfloat16)
    if dtype not in DTYPES:
        raise EngineError(f"unknown dtype {dtype!r}; use one of auto, {', '.join(DTYPES)}")
    return DTYPES[dtype]


def load(model_ref: str, device: str = "auto", dtype: str = "auto") -> Loaded:
    path = resolve(model_ref)
    raw = read_json(path / "config.json")
    if raw is None:
        raise EngineError(f"{path} has no config.json: is it a checkpoint directory?")
    config = ModelConfig.from_hf(raw)
    template = checkpoint_template(path)  # before the weights: a malformed one fails at once
    tokenizer = Tokenizer.from_dir(path)
    _complete_stop_ids(config, tokenizer, path)
    torch_device = load_device(device)
    torch_dtype = load_dtype(dtype, config, torch_device)
    with torch.device("meta"):
        model = SDARModel(config)
    state = _read_weights(path, torch_device, torch_dtype)
    _check_weights(model, state, path)
    model.load_state_dict(state, strict=False, assign=True)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    model.eval().requires_grad_(False)
    return Loaded(model=model, tokenizer=tokenizer, config=config, path=path, template=template)


def _complete_stop_ids(config: ModelConfig, tokenizer: Tokenizer, path: Path) -> None:
    """Stop on the config's EOS, generation_config.json's EOS ids and the chat's <|im_end|>, as SDAR-Chat does."""
    ids = list(config.stop_token_ids)
    generation = read_json(path / "generation_config.json") or {}
    eos = generation.get("eos_token_id", [])
    ids += eos if isinstance(eos, list) else [eos]
    for token in ("<|im_end|>", "<|endoftext|>"):
        if tokenizer.token_id(token) is not None:
            ids.append(tokenizer.token_id(token))
    config.stop_token_ids = tuple(dict.fromkeys(int(i) for i in ids))


def _weight_files(path: Path) -> list[Path]:
    index = read_json(path / INDEX)
    if index is not None:
        names = sorted(set((index.get("weight_map") or {}).values()))
        if not names:
            raise EngineError(f"{path / INDEX} has no weight_map")
        missing = [name for name in names if not (path / name).is_file()]
        if missing:
            raise EngineError(
                f"{path} lacks shard{'s' if len(missing) > 1 else ''} {', '.join(missing)} named in {INDEX}; "
                "download the checkpoint again"
            )
        return [path / name for name in names]
    if (path / "model.safetensors").is_file():
        return [path / "model.safetensors"]
    if any(path.glob("*.bin")) or any(path.glob("*.pt")):
        raise EngineError(f"{path} holds PyTorch pickles, not safetensors; dice-lsp loads only *.safetensors")
    raise EngineError(f"{path} has no model.safetensors and no {INDEX}")


def _read_weights(path: Path, device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    state = {}
    for file in _weight_files(path):
        try:
            with safe_open(str(file), framework="pt", device=str(device)) as reader:
                for name in reader.keys():
                    state[name] = reader.get_tensor(name).to(dtype)
        except EngineError:
            raise
        except Exception as error:  # safetensors raises its own SafetensorError on truncated files
            raise EngineError(f"cannot read {file}: {error}; download the checkpoint again") from None
    return state


def _check_weights(model: SDARModel, state: dict[str, torch.Tensor], path: Path) -> None:
    expected = {name: tuple(p.shape) for name, p in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        expected.pop("lm_head.weight", None)
        state.pop("lm_head.weight", None)
    missing = sorted(set(expected) - set(state))
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise EngineError(f"{path} lacks tensor{'s' if len(missing) > 1 else ''} {shown}: not a complete Qwen3/SDAR checkpoint")
    for name, shape in expected.items():
        if tuple(state[name].shape) != shape:
            raise EngineError(
                f"{path}: tensor {name} has shape {tuple(state[name].shape)} but config.json implies {shape}"
            )
    unexpected = sorted(set(state) - set(expected))
    if unexpected:
        raise EngineError(f"{path} holds tensors the SDAR model does not have: {', '.join(unexpected[:5])}")


def save(model: SDARModel, tokenizer: Tokenizer | Loaded, out_dir, max_shard_bytes: int | None = None) -> Path:
    """Write `model` and `tokenizer` to `out_dir` in the HF layout, replacing it only once everything is written.

    With max_shard_bytes, weights are split into model-0000N-of-0000M.safetensors plus an index, as HF does.
    """
    if isinstance(tokenizer, Loaded):
        tokenizer = tokenizer.tokenizer
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        config = model.config
        state = {name: t.detach().cpu().clone() for name, t in model.state_dict().items()}  # no shared storage
        if config.tie_word_embeddings:
            state.pop("lm_head.weight", None)
        saved_dtype = next(iter(state.values())).dtype
        hf = config.to_hf()
        hf["torch_dtype"] = {v: k for k, v in DTYPES.items()}.get(saved_dtype, config.torch_dtype)
        (temp / "config.json").write_text(json.dumps(hf, indent=2) + "\n")
        generation = {"eos_token_id": list(config.stop_token_ids)}
        if not config.causal:
            generation["mask_token_id"] = config.mask_token_id
        (temp / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
        _write_weights(state, temp, max_shard_bytes)
        tokenizer.save(temp)
        if out_dir.exists():
            old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
            os.replace(out_dir, old)
            os.replace(temp, out_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(temp, out_dir)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return out_dir


def _write_weights(state: dict[str, torch.Tensor], directory: Path, max_shard_bytes: int | None) -> None:
    metadata = {"format": "pt"}
    if max_shard_bytes is None:
        save_file(state, str(directory / "model.safetensors"), metadata=metadata)
        return
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, tensor in state.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += nbytes
    weight_map = {}
    for i, shard in enumerate(shards, 1):
        file = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(directory / file), metadata=metadata)
        weight_map.update({name: file for name in shard})
    total = sum(t.numel() * t.element_size() for t in state.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / INDEX).write_text(json.dumps(index, indent=2) + "\n")
