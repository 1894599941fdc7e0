"""One process or many under torchrun: process-group setup, model wrapping (DDP or FSDP2) and rank helpers.

The same command runs alone or as `torchrun --nproc-per-node N dice-lsp train ...`; gloo on CPU, NCCL on GPUs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1


def setup(device: str) -> tuple[World, torch.device]:
    """The process's place in the job (from torchrun's variables) and the device it trains on."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    world = World(int(os.environ.get("RANK", "0")), size, int(os.environ.get("LOCAL_RANK", "0")))
    use_cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    if use_cuda:
        torch.cuda.set_device(world.local_rank if device in ("auto", "cuda") else torch.device(device))
        where = torch.device("cuda", torch.cuda.current_device())
    else:
        where = torch.device("cpu")
    if world.distributed and not dist.is_initialized():
        dist.init_process_group("nccl" if use_cuda else "gloo")
    return world, where


def wrap(module: nn.Module, world: World, device: torch.device, fsdp: bool) -> nn.Module:
    """DDP (every rank holds the whole model) or FSDP2 (each layer's weights sharded over the ranks)."""
    if not world.distributed:
        return module
    if fsdp:
        from torch.distributed.fsdp import fully_shard  # half a second to import: only for --fsdp

        for layer in module.model.model.layers:
            fully_shard(layer)
        return fully_shard(module)
    return DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None)


def full_state(module: nn.Module, fsdp: bool) -> dict[str, torch.Tensor]:
    """The whole (unsharded) state dict of `module`, on CPU; with FSDP every rank must call this."""
    if fsdp and dist.is_initialized():
        # Most of a second to import: only a sharded (--fsdp) run needs it.
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {k: v.detach().cpu() for k, v in module.state_dict().items()}


def barrier(world: World) -> None:
    if world.distributed:
        dist.barrier()


def all_sum(value: float, world: World, device: torch.device) -> float:
    if not world.distributed:
        return float(value)
    tensor = torch.tensor([float(value)], dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return float(tensor.item())


def all_gather_objects(value, world: World) -> list:
    if not world.distributed:
        return [value]
    out = [None] * world.size
    dist.all_gather_object(out, value)
    return out


def teardown(world: World) -> None:
    if world.distributed and dist.is_initialized():
        dist.destroy_process_group()
