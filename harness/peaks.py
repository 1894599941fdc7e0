"""What a worker process holds in memory: torch's GPU allocator and the host's resident memory and address space, with
peaks reset where a stage or a command begins. For the reference's measured forward (`stages.reference`), each reply's
`messages.Cost`, and what a reference worker tells of its device (`memory.Device`).
"""

from __future__ import annotations

import os
import resource

import torch


def _status() -> dict[str, int]:
    """VmRSS, VmHWM, VmSize and VmPeak of this process, in bytes (empty where /proc is not readable)."""
    found = {}
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(("VmRSS:", "VmHWM:", "VmSize:", "VmPeak:")):
                    name, value = line.split(":", 1)
                    found[name] = int(value.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    return found


def _reset_host() -> bool:
    """Reset this process's resident high-water mark (VmHWM) to what it holds now; False where the kernel does not
    let it (clear_refs "5", Linux 4.0 and later)."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


class Peak:
    """The most this process held from `reset()` on: `gpu()` (torch's allocated and reserved bytes) and `host()`
    (resident bytes; since the process began where the high-water mark cannot be reset). `mark()` resets the
    counters for a measurement of its own (a forward's peak) while keeping what they said for the whole."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.seen = (0, 0, 0)
        self._reset_counters()

    def _reset_counters(self) -> None:
        if _cuda():
            torch.cuda.reset_peak_memory_stats()
        self.host_reset = _reset_host()

    def mark(self) -> None:
        self.seen = (*self.gpu(), self.host())
        self._reset_counters()

    def gpu(self) -> tuple[int, int]:
        if not _cuda():
            return self.seen[0], self.seen[1]
        return (max(self.seen[0], int(torch.cuda.max_memory_allocated())),
                max(self.seen[1], int(torch.cuda.max_memory_reserved())))

    def host(self) -> int:
        found = _status()
        if self.host_reset and "VmHWM" in found:
            return max(self.seen[2], found["VmHWM"])
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _cuda() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_initialized()


def address_space() -> int:
    """This process's address space now (VmSize): what its RLIMIT_AS counts."""
    return _status().get("VmSize", 0)


def resident() -> int:
    return _status().get("VmRSS", 0)


def host_total() -> int:
    """The host's physical memory."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def allocated(device: torch.device) -> int:
    """Bytes this process holds now on `device`: torch's allocator on a GPU, resident memory on the CPU."""
    if device.type == "cuda":
        return int(torch.cuda.memory_allocated(device))
    return resident()


def device_key(device: torch.device) -> str:
    """What two checks on the same memory have in common: the GPU's UUID (CUDA_VISIBLE_DEVICES numbers GPUs per
    process), or "host"."""
    if device.type != "cuda":
        return "host"
    properties = torch.cuda.get_device_properties(device)
    uuid = getattr(properties, "uuid", None)
    return f"cuda:{uuid}" if uuid is not None else f"cuda:{device.index}:{properties.name}"
