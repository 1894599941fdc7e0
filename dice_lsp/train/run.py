"""The moving parts every training run shares: model (full or LoRA), optimizer, schedule, precision, devices,
checkpoints with resume, metrics and progress. SFT and RL each drive a `TrainingRun` one optimizer step at a time."""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from dice_lsp.engine.checkpoint import load
from dice_lsp.train import checkpoints, distributed
from dice_lsp.train.errors import TrainError
from dice_lsp.train.metrics import MetricsLog
from dice_lsp.train.objective import Objective
from dice_lsp.train.pack import IGNORE, Piece, Row, join

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass
class RunConfig:
    model: str  # the checkpoint to start from (a directory or a hub id in the local cache)
    out: str  # the run's directory: checkpoints/, latest, final/, metrics.jsonl, plots
    seed: int = 0
    lr: float = 1e-5
    weight_decay: float = 0.0
    warmup_steps: int = 0
    schedule: str = "cosine"  # "cosine" (to 10 % of lr) or "constant", after the warm-up
    grad_clip: float = 1.0
    lora_rank: int = 0  # 0 = full fine-tuning
    lora_alpha: float = 32.0
    precision: str = "auto"  # "auto" (bf16 autocast on GPU, fp32 on CPU), "bf16" or "fp32"
    gradient_checkpointing: bool = False
    attention: str = "auto"  # "auto" (flex on GPU, sdpa on CPU), "sdpa" or "flex"
    device: str = "auto"
    fsdp: bool = False
    save_every: int = 100
    keep: int = 2
    resume: bool = True
    progress: bool = True
    # Stop after this many seconds of training (0 = none), resumes included; the schedule then follows the clock,
    # so the run is not reproducible step for step, but it ends on time with the learning rate fully decayed.
    time_limit: float = 0.0
    # Stop this process after this many seconds of training (0 = none) and save: the same command resumes, and with
    # time_limit the schedule spans the whole limit across such slices (machines lent for minutes at a time).
    stop_after: float = 0.0


class TrainingRun:
    """One fine-tuning run in `config.out`: the model, its optimizer and schedule, on every rank, resumed from the
    latest checkpoint there; SFT and RL call it one optimizer step at a time."""

    def __init__(self, config: RunConfig, kind: str, total_steps: int):
        self.config, self.kind, self.total_steps = config, kind, total_steps
        self.out = Path(config.out)
        self.trained_seconds = 0.0  # before this process started (from the checkpoint)
        self.started = time.monotonic()
        self.clock = 0.0  # training seconds as of the last optimizer step, agreed by every rank
        self.world, self.device = distributed.setup(config.device)
        if self.world.main:
            self.out.mkdir(parents=True, exist_ok=True)
        distributed.barrier(self.world)
        seed_everything(config.seed + self.world.rank)
        resume_from = checkpoints.latest(self.out) if config.resume else None
        if resume_from is not None:
            self._same_run(resume_from)
        start = config.model if (resume_from is None or config.lora_rank) else str(resume_from)
        loaded = load(start, device=str(self.device), dtype="float32")  # fp32 master weights
        self.tokenizer, self.model_config = loaded.tokenizer, loaded.config
        self.saved_dtype = loaded.config.torch_dtype
        model = loaded.model
        model.requires_grad_(True)  # the engine loads for inference
        if config.lora_rank:
            inject_lora(model, config.lora_rank, config.lora_alpha)
            if resume_from is not None:
                adapter = checkpoints.read_trainer(resume_from, "adapter.safetensors")
                missing = set(adapter) - set(model.state_dict())
                if missing:
                    raise TrainError(f"{resume_from}: adapter does not fit this model ({sorted(missing)[:2]})")
                model.load_state_dict(adapter, strict=False)
        model.gradient_checkpointing = config.gradient_checkpointing
        model.train()
        self.model = model  # the SDAR model itself (with LoRA layers injected in place): decode with this
        attention = config.attention
        if attention == "auto":
            attention = "flex" if self.device.type == "cuda" else "sdpa"
        self.objective = Objective(model, attention)
        self.trained = distributed.wrap(self.objective, self.world, self.device, config.fsdp)
        params = [p for p in self.trained.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=config.lr, betas=(0.9, 0.95), eps=1e-8,
                                           weight_decay=config.weight_decay, fused=self.device.type == "cuda")
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)
        self.step = 0
        self.state: dict = {}  # what the driver needs to resume (e.g. RL's reference to the last stage)
        if resume_from is not None:
            self._restore(resume_from)
        self.metrics = MetricsLog(self.out, self.step, self.world.main)
        if self.world.main:
            (self.out / "run.json").write_text(json.dumps({"kind": kind, **asdict(config)}, indent=2) + "\n")
        self.resumed_from = resume_from

    # -- precision and steps ---------------------------------------------------------------------------------

    @property
    def bf16(self) -> bool:
        return self.config.precision == "bf16" or (self.config.precision == "auto" and self.device.type == "cuda")

    def autocast(self):
        if not self.bf16:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    def _lr_factor(self, step: int) -> float:
        warm = self.config.warmup_steps
        if step < warm:
            return (step + 1) / warm
        if self.config.schedule == "constant":
            return 1.0
        span = max(1, self.total_steps - warm)
        progress = min(1.0, (step - warm) / span)
        if self.config.time_limit:
            progress = max(progress, min(1.0, self.clock / self.config.time_limit))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    def cross_entropy(self, row: Row, sync: bool) -> torch.Tensor:
        """Per-token CE at row's trained tokens; gradients are synchronised over ranks only when `sync`."""
        row = row.to(self.device)
        with self._sync(sync), self.autocast():
            return self.trained(row.input_ids, row.position, self.objective.mask(row), row.target)

    def _sync(self, sync: bool):
        if not self.world.distributed or sync:
            return contextlib.nullcontext()
        if self.config.fsdp:
            self.trained.set_requires_gradient_sync(False)
            return _after(lambda: self.trained.set_requires_gradient_sync(True))
        return self.trained.no_sync()

    def idle_row(self) -> Row:
        """A one-block row that trains nothing: a rank without work still joins the gradient all-reduce."""
        n = self.model_config.block_size
        eos = torch.full((n,), self.model_config.eos_token_id, dtype=torch.long)
        target = torch.full((n,), IGNORE, dtype=torch.long)
        target[0] = self.model_config.eos_token_id
        return join([Piece(eos, torch.arange(n), torch.zeros(n, dtype=torch.long), target, torch.zeros(n), 1)])

    def optimizer_step(self) -> dict:
        params = [p for p in self.trained.parameters() if p.requires_grad]
        norm = torch.nn.utils.clip_grad_norm_(params, self.config.grad_clip)
        if self.config.time_limit or self.config.stop_after:  # rank 0's clock: every rank decides alike
            mine = self.trained_seconds + time.monotonic() - self.started if self.world.main else 0.0
            self.clock = distributed.all_sum(mine, self.world, self.device)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
        return {"grad_norm": float(norm), "lr": self.scheduler.get_last_lr()[0]}

    def out_of_time(self) -> bool:
        """True once the run has trained for --time-limit seconds, or this process for --stop-after seconds (every
        rank gets the same answer)."""
        return bool(self.config.time_limit) and self.clock >= self.config.time_limit or self.paused()

    def paused(self) -> bool:
        """This process stopped at --stop-after, not at the end of the run: the same command continues it."""
        return bool(self.config.stop_after) and self.clock - self.trained_seconds >= self.config.stop_after

    def log(self, record: dict) -> None:
        self.metrics.write({"step": self.step, **record})

    # -- checkpoints -----------------------------------------------------------------------------------------

    def weights(self) -> dict[str, torch.Tensor]:
        """The model's full state dict (every rank must call this under FSDP), LoRA merged in."""
        state = distributed.full_state(self.objective, self.config.fsdp)
        return {k.removeprefix("model."): v for k, v in state.items()}  # Objective holds the model as `model`

    def save(self) -> Path | None:
        state = self.weights()
        plain = checkpoints.merge_lora(state, self.lora_scaling) if self.config.lora_rank else state
        staging = checkpoints.staging_dir(self.out, self.step)
        if self.world.main:
            checkpoints.write_model(self.out, self.step, self.model_config, plain, self.tokenizer)
        distributed.barrier(self.world)
        files = {"rng-{rank}.pt": rng_state()}
        if self.config.fsdp or self.world.main:
            files["optimizer-{rank}.pt" if self.config.fsdp else "optimizer.pt"] = self.optimizer.state_dict()
        if self.world.main:
            files["scheduler.pt"] = self.scheduler.state_dict()
            files["state.json"] = {"step": self.step, "kind": self.kind, "world_size": self.world.size,
                                   "state": self.state, "clock": self.clock, "started_from": self._origin()}
            if self.config.lora_rank:
                files["adapter.safetensors"] = checkpoints.adapter_of(state)
        checkpoints.write_trainer(staging, self.world.rank, files)
        distributed.barrier(self.world)
        path = checkpoints.publish(self.out, self.step, self.config.keep) if self.world.main else None
        if self.world.main:
            self.metrics.plot()
        distributed.barrier(self.world)
        return path

    def _origin(self) -> dict:
        """What this run started from, kept in each checkpoint: the model as named and the folder it named then."""
        model = self.config.model
        return {"model": model, "folder": os.path.realpath(model) if os.path.isdir(model) else None,
                "lora_rank": self.config.lora_rank}

    def _same_run(self, checkpoint: Path) -> None:
        """Refuse to resume a checkpoint of a run that started from another model (or another LoRA rank) than this
        command names: its weights would be trained on as if they were the named model's. Held against the
        checkpoint itself, not run.json, which says only what the last command asked."""
        try:
            earlier = checkpoints.read_trainer(checkpoint, "state.json").get("started_from")
        except (OSError, ValueError, AttributeError, TrainError):  # _restore says what is wrong with it
            earlier = None
        if not isinstance(earlier, dict):
            return  # written before checkpoints said where they started from: nothing to hold them to
        now = self._origin()
        same_model = (earlier.get("folder") == now["folder"]) if earlier.get("folder") and now["folder"] else \
            earlier.get("model") == now["model"]
        for differs, shown, field in ((not same_model, "the model", "model"),
                                      (earlier.get("lora_rank") != now["lora_rank"], "--lora-rank", "lora_rank")):
            if differs:
                raise TrainError(f"{self.out} holds a run that started from {shown} {earlier.get(field)!r} (its "
                                 f"latest checkpoint: {checkpoint.name}), and this command names {now[field]!r}: "
                                 "name another --out, or pass --no-resume to start over there")

    def _restore(self, path: Path) -> None:
        info = checkpoints.read_trainer(path, "state.json")
        if info.get("kind") != self.kind:
            raise TrainError(f"{path} is a {info.get('kind')} checkpoint, not {self.kind}; use another --out")
        if self.config.fsdp and info.get("world_size") != self.world.size:
            raise TrainError(f"{path} was written by {info.get('world_size')} FSDP ranks; resume with as many")
        optimizer = "optimizer-{rank}.pt" if self.config.fsdp else "optimizer.pt"
        self.optimizer.load_state_dict(checkpoints.read_trainer(path, optimizer, self.world.rank))
        self.scheduler.load_state_dict(checkpoints.read_trainer(path, "scheduler.pt"))
        if self.world.size == info.get("world_size"):
            set_rng_state(checkpoints.read_trainer(path, "rng-{rank}.pt", self.world.rank))
        self.step = int(info["step"])
        self.state = dict(info.get("state") or {})
        self.clock = self.trained_seconds = float(info.get("clock") or 0.0)

    def finish(self) -> Path | None:
        """Write the last checkpoint (if the last step has none) and `<out>/final`; returns final's path."""
        latest = checkpoints.latest(self.out) if (self.out / "latest").exists() else None
        if latest is None or not latest.name.endswith(f"{self.step:07d}"):
            self.save()
        state = self.weights()
        plain = checkpoints.merge_lora(state, self.lora_scaling) if self.config.lora_rank else state
        final = None
        if self.world.main:
            final = checkpoints.export(self.out, self.model_config, plain, self.tokenizer, self.saved_dtype)
            info = {"kind": self.kind, "steps": self.step, "started_from": self.config.model, **self.state}
            (final / "training.json").write_text(json.dumps(info, indent=2) + "\n")
            self.metrics.plot()
        distributed.barrier(self.world)
        return final

    @property
    def lora_scaling(self) -> float:
        return self.config.lora_alpha / max(1, self.config.lora_rank)

    def progress_bar(self, initial: int) -> tqdm:
        return tqdm(total=self.total_steps, initial=initial, desc=f"train {self.kind}", unit="step",
                    disable=not (self.world.main and self.config.progress), dynamic_ncols=True)

    def close(self) -> None:
        distributed.teardown(self.world)


@contextlib.contextmanager
def _after(action):
    try:
        yield
    finally:
        action()


def inject_lora(model, rank: int, alpha: float) -> None:
    """LoRA adapters on every projection (peft), in place; only the adapters train."""
    try:  # peft is optional (the `lora` extra): only runs with --lora-rank need it
        from peft import LoraConfig, inject_adapter_in_model
    except ImportError:
        raise TrainError("LoRA needs peft: pip install 'dice-lsp[lora]' (or peft), or drop --lora-rank") from None
    inject_adapter_in_model(LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=LORA_TARGETS), model)
    for name, param in model.named_parameters():
        param.requires_grad_(".lora_" in name)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict:
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
