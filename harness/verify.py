"""Verify stage: trial inputs with fresh seeds, the outputs of each side, and their element-by-element comparison.

Each worker makes every trial's inputs itself from the trial's seed (`make_inputs`); the reference worker keeps the
expected outputs, and the solution worker only ever sees inputs.
"""

from __future__ import annotations

import base64
import math
import random
import sys
from typing import Any, Callable

import torch

from dice_lsp.harness.memory import COMPARE_CHUNK, DIGEST_CHUNK

CHANGED_SEED_OFFSET = 10_000  # the in-place changed inputs use seed + this


def trial_seeds(seed: int, trials: int) -> list[int]:
    return [seed + 1 + i for i in range(trials)]


def make_inputs(module: Any, seed: int, device: torch.device) -> tuple[list[Any], str]:
    """One trial's inputs on `device`, as KernelBench makes them (the seed, then get_inputs()), and where they were
    made: "device" or "host". On a GPU, get_inputs runs with the GPU as torch's default device, so its tensors are
    made there (an 8.6 GB input: milliseconds, against seconds on the CPU and as much host memory); a get_inputs that
    cannot run so (numpy, an explicit device="cpu" mix) runs again on the host. Every worker calls this with the
    same module, seed and device, so each makes the same values itself: no tensor data goes between processes."""
    seed_all(seed)
    if device.type == "cuda":
        try:
            with torch.device(device):
                made = list(module.get_inputs())
            return to_device(made, device), "device"
        except torch.cuda.OutOfMemoryError:
            raise
        except Exception:  # noqa: BLE001  (made again on the host, where any error of its own is raised)
            seed_all(seed)
    return to_device(list(module.get_inputs()), device), "host"


def out_of_memory(what: str, trial_bytes: int, device: torch.device, planned: int = 0) -> str:
    """What a worker that ran out of memory says, in numbers: what one trial takes (as the reference measured it:
    a solution's worker can run out before it has made a trial of its own), what the check's plan let this worker
    hold, and what the GPU has and this worker holds there."""
    trial = f"one trial's inputs and outputs take {trial_bytes / 1e9:.2f} GB" if trial_bytes else \
        "one trial's size was not measured yet"
    plan = f"the check's memory plan let this worker hold {planned / 1e9:.2f} GB; " if planned else ""
    if device.type != "cuda":
        return (f"the host ran out of memory {what}: {trial}; {plan}this worker held {_resident() / 1e9:.2f} GB. "
                "Other jobs on the machine, or a memory limit (memory_limit_gb), left it too little")
    free, total = torch.cuda.mem_get_info(device)
    held = torch.cuda.memory_reserved(device)
    return (f"the GPU ran out of memory {what}: {trial}; {plan}the GPU has {total / 1e9:.1f} GB, {free / 1e9:.1f} GB "
            f"free, {held / 1e9:.1f} GB held by this worker. Other processes on the GPU held the rest, or the problem "
            "needs more than it has: smaller inputs in get_inputs, or a GPU with more memory, would let it run")


def _resident() -> int:
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))
    except (OSError, StopIteration, ValueError):
        return 0


def host_out_of_memory(error: BaseException) -> bool:
    """Whether `error` is the CPU allocator's failure (a RuntimeError, not torch's OutOfMemoryError)."""
    return isinstance(error, RuntimeError) and "DefaultCPUAllocator: can't allocate memory" in str(error)


def tensor_bytes(values: list[Any]) -> int:
    """The bytes of the tensors among `values`."""
    return sum(t.numel() * t.element_size() for t in values if isinstance(t, torch.Tensor))


def seed_all(seed: int) -> None:
    """torch's generators (KernelBench's convention), and Python's and numpy's too: a get_inputs drawing from
    those must make the same values in every worker."""
    torch.manual_seed(seed)
    random.seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed % (1 << 32))


def flatten(value: Any) -> list[torch.Tensor]:
    """Outputs as a flat list of tensors: tuples and lists element by element, numbers as 0-d tensors."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in flatten(item)]
    if isinstance(value, (int, float, bool)):
        return [torch.tensor(value)]
    raise TypeError(f"forward returned {type(value).__name__}, which cannot be compared")


def plain(value: Any, device: torch.device) -> str:
    """Why forward's `value` is not plain, materialised output, or "" when it is: tensors that are exactly
    torch.Tensor (a subclass can hold a recipe and compute its values only when someone reads them, outside the
    timer), strided, on the check's device (a "meta" tensor has no values at all); numbers, tuples and lists of
    them too."""
    if isinstance(value, (tuple, list)):
        return next((why for why in (plain(item, device) for item in value) if why), "")
    if isinstance(value, (int, float, bool)):
        return ""
    if not isinstance(value, torch.Tensor):
        return f"a {type(value).__name__}, not a tensor"
    if type(value) is not torch.Tensor:
        return f"a {type(value).__name__} (a torch.Tensor subclass)"
    if value.layout != torch.strided:
        return f"a {value.layout} tensor"
    if value.device.type != device.type:
        return f"a tensor on {value.device}"
    return ""


def same(before: Any, after: Any) -> bool:
    """Whether a tensor holds what its copy `before` held (NaN where NaN was); anything else is the same."""
    if not isinstance(before, torch.Tensor) or not isinstance(after, torch.Tensor):
        return True
    if before.shape != after.shape or before.dtype != after.dtype:
        return False
    if torch.equal(before, after):
        return True
    if not before.is_floating_point() and not before.is_complex():
        return False
    nan = torch.isnan(before)
    return torch.equal(nan, torch.isnan(after)) and torch.equal(before[~nan], after[~nan])


def to_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (tuple, list)):
        return type(value)(to_device(v, device) for v in value)
    return value


def clone(value: Any) -> Any:
    return value.clone() if isinstance(value, torch.Tensor) else value


def detach_cpu(values: list[torch.Tensor]) -> list[torch.Tensor]:
    return [v.detach().to("cpu", copy=True) for v in values]


def copies(values: list[torch.Tensor], on_gpu: bool) -> list[torch.Tensor]:
    """Outputs as they are now (a later forward may reuse their buffers): contiguous copies on their GPU when
    `on_gpu` and there is room there, else copies in host memory."""
    if on_gpu:
        try:
            return [v.detach().clone(memory_format=torch.contiguous_format) for v in values]
        except torch.cuda.OutOfMemoryError:
            pass
    return detach_cpu(values)


def share(tensors: list[torch.Tensor]) -> list[dict[str, Any]]:
    """CUDA IPC descriptions (JSON-ready) of contiguous CUDA `tensors`, for another process on the same GPU to open
    with `receive`; the tensors must stay alive until it has. Nothing goes through host memory or files: with
    4096x4096 outputs, copying them to the host and writing them out took most of a second of a re-check."""
    described = []
    for tensor in tensors:
        kind = {"dtype": str(tensor.dtype).removeprefix("torch."), "shape": list(tensor.shape)}
        if tensor.numel() == 0:
            described.append({**kind, "device": tensor.device.index, "empty": True})
            continue
        device, handle, size, offset, counter, counter_offset, event, sync = tensor.untyped_storage()._share_cuda_()
        described.append({**kind, "device": device, "storage_offset": tensor.storage_offset(), "handle": _text(handle),
                          "size": size, "offset": offset, "counter": _text(counter),
                          "counter_offset": counter_offset, "event": _text(event), "sync": bool(sync)})
    return described


def receive(described: list[dict[str, Any]]) -> list[torch.Tensor]:
    """Open what `share` described, in this process (the reference worker): views of the other process's memory.
    The descriptions come from the solution's process, so they are checked, never unpickled."""
    tensors = []
    for entry in described:
        dtype = getattr(torch, str(entry["dtype"]), None)
        shape = [int(n) for n in entry["shape"]]
        if not isinstance(dtype, torch.dtype) or any(n < 0 for n in shape):
            raise ValueError(f"shared output with dtype {entry['dtype']!r} and shape {shape}")
        device = torch.device("cuda", int(entry["device"]))
        if entry.get("empty"):
            tensors.append(torch.empty(shape, dtype=dtype, device=device))
            continue
        storage = torch.UntypedStorage._new_shared_cuda(
            int(entry["device"]), _bytes(entry["handle"]), int(entry["size"]), int(entry["offset"]),
            _bytes(entry["counter"]), int(entry["counter_offset"]), _bytes(entry["event"]), bool(entry["sync"]))
        tensors.append(torch.empty(0, dtype=dtype, device=device).set_(storage, int(entry["storage_offset"]), shape))
    return tensors


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else base64.b64encode(raw).decode("ascii")


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def change_in_place(inputs: list[Any], changed: list[Any]) -> int:
    """Copy new values into the same tensors (same storage, same pointers); returns how many tensors changed."""
    count = 0
    for tensor, new in zip(inputs, changed):
        if isinstance(tensor, torch.Tensor) and isinstance(new, torch.Tensor) and tensor.shape == new.shape:
            with torch.no_grad():
                tensor.copy_(new)
            count += 1
    return count


def unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The index of element `flat` of a contiguous tensor of `shape` (torch.unravel_index imports sympy: ~1.5 s)."""
    index = []
    for size in reversed(shape):
        flat, rest = divmod(flat, size)
        index.append(rest)
    return tuple(reversed(index))


def _on_gpu_or_cpu(work: Callable[[torch.device], Any], device: torch.device | None) -> Any:
    """`work(device)` on a CUDA `device`, or on the CPU when there is none or it has no room for the work."""
    if device is not None and device.type == "cuda":
        try:
            return work(device)
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
    return work(torch.device("cpu"))


def norm(tensor: torch.Tensor, device: torch.device | None = None, chunk: int = COMPARE_CHUNK) -> float:
    """The L2 norm in float64, a chunk at a time (an 8.6 GB float32 output is 17 GB in float64), on `device` when
    there is room for it there."""
    def work(where: torch.device) -> float:
        flat, total = tensor.detach().reshape(-1), 0.0
        for start in range(0, flat.numel(), chunk):
            total += float(flat[start:start + chunk].to(where, torch.float64).square().sum())
        return math.sqrt(total)
    return _on_gpu_or_cpu(work, device)


def compare(got: list[torch.Tensor], expected: list[torch.Tensor], atol: float, rtol: float,
            device: torch.device | None = None) -> dict[str, Any]:
    """Compare outputs like torch.allclose, and say how far off the worst element is and where.

    On `device` (the reference worker's GPU) when given: in float64 on a CPU, a 16 M-element output took 2.2 s, and
    a check compares one per trial. Falls back to the CPU when the GPU has no room for it.
    """
    return _on_gpu_or_cpu(lambda where: _compare(got, expected, atol, rtol, where), device)


def _compare(got, expected, atol, rtol, device, chunk: int = COMPARE_CHUNK) -> dict[str, Any]:
    """`compare`, one output and one chunk of its elements at a time (COMPARE_CHUNK: float64 temporaries of a few
    hundred MB, `memory.COMPARE_BYTES_PER_ELEMENT`): an output of 2.3e9 elements needs 18 GB per float64 temporary
    whole, more than a GPU (or the worker's memory limit) leaves once both sides hold theirs."""
    result: dict[str, Any] = {"passed": True, "max_abs_error": 0.0, "max_rel_error": 0.0, "where": "",
                              "relative_l2": 0.0, "note": "", "dtype_notes": []}
    if len(got) != len(expected):
        return {**result, "passed": False, "note": f"{len(got)} outputs, the reference has {len(expected)}"}
    diff_sq, ref_sq, worst = 0.0, 0.0, -math.inf
    for i, (g, e) in enumerate(zip(got, expected)):
        label = "output" if len(got) == 1 else f"output[{i}]"
        if g.shape != e.shape:
            return {**result, "passed": False, "note": f"{label} has shape {tuple(g.shape)}, expected {tuple(e.shape)}"}
        if g.dtype != e.dtype:
            result["dtype_notes"].append(f"{label} is {g.dtype}, the reference is {e.dtype}")
        if g.numel() == 0:
            continue
        g_flat, e_flat = g.reshape(-1), e.reshape(-1)
        nonfinite = nan_differs = False
        for start in range(0, g_flat.numel(), chunk):
            g64 = g_flat[start:start + chunk].to(device=device, dtype=torch.float64)
            e64 = e_flat[start:start + chunk].to(device=device, dtype=torch.float64)
            nonfinite = nonfinite or not bool(torch.isfinite(g64).all())
            nan_differs = nan_differs or not bool((torch.isnan(g64) == torch.isnan(e64)).all())
            abs_err = torch.sub(g64, e64).abs_()
            abs_err.masked_fill_(torch.isnan(abs_err), math.inf)
            ref_sq += float(torch.where(torch.isfinite(e64), e64, 0.0).square_().sum())
            e_abs = e64.abs()  # not in place: e64 may be the caller's tensor itself (float64 already on `device`)
            result["max_rel_error"] = max(result["max_rel_error"], float((abs_err / e_abs.clamp_min(1e-12)).max()))
            excess = abs_err - e_abs.mul_(rtol).add_(atol)  # |g - e| - (atol + rtol |e|): positive where not close
            flat = int(torch.argmax(excess))
            if float(excess[flat]) > worst:
                worst = float(excess[flat])
                index = unravel(start + flat, tuple(g.shape))
                result["where"] = f"{label}[{', '.join(map(str, index))}]" if index else label
            result["max_abs_error"] = max(result["max_abs_error"], float(abs_err.max()))
            # Every element within its bound is allclose; else (or NaN) ask allclose itself: equal infinities are close
            if not float(excess[flat]) <= 0 and not torch.allclose(g64, e64, atol=atol, rtol=rtol):
                result["passed"] = False
            finite = torch.isfinite(abs_err)
            diff_sq += float(torch.where(finite, abs_err, 0.0).square_().sum()) + (0.0 if finite.all() else math.inf)
            del g64, e64, abs_err, e_abs, excess, finite
        if nonfinite and nan_differs:
            result.update(passed=False, note=f"{label} has NaN or inf where the reference has none")
    empty = 0.0 if diff_sq == 0 else math.inf
    result["relative_l2"] = math.sqrt(diff_sq) / math.sqrt(ref_sq) if ref_sq > 0 else empty
    return result


SAMPLE_POINTS = 4096  # elements of each output kept from a verified call, to check a later call's outputs against


def sample(outputs: list[torch.Tensor]) -> list[tuple[tuple[int, ...], torch.Tensor, torch.Tensor]]:
    """Each output's shape, SAMPLE_POINTS positions drawn now (after the call returned: forward cannot know them)
    and its values there, on the host: enough to tell whether a later call on the same inputs computed the same
    thing, at any output size."""
    kept = []
    for tensor in outputs:
        flat = tensor.detach().reshape(-1)
        count = flat.numel()
        if count <= SAMPLE_POINTS:
            where = torch.arange(count)
        else:  # from the system's randomness, not torch's seeded one, which forward could set or read
            drawn = torch.Generator().manual_seed(random.SystemRandom().getrandbits(63))
            where = torch.randint(count, (SAMPLE_POINTS,), generator=drawn)
        kept.append((tuple(tensor.shape), where, flat[where.to(flat.device)].to("cpu", copy=True)))
    return kept


def matches(outputs: list[torch.Tensor], kept: list[tuple[tuple[int, ...], torch.Tensor, torch.Tensor]],
            atol: float, rtol: float) -> str:
    """"" when `outputs` have the kept shapes and agree with the kept values at their positions (as allclose
    would), else what differs."""
    if len(outputs) != len(kept):
        return f"{len(outputs)} outputs, {len(kept)} when verified"
    for i, (tensor, (shape, where, values)) in enumerate(zip(outputs, kept)):
        label = "output" if len(kept) == 1 else f"output[{i}]"
        if tuple(tensor.shape) != shape:
            return f"{label} has shape {tuple(tensor.shape)}, {shape} when verified"
        got = tensor.detach().reshape(-1)[where.to(tensor.device)].to("cpu")
        if got.dtype != values.dtype or not torch.allclose(got.double(), values.double(), atol=atol, rtol=rtol,
                                                           equal_nan=True):
            worst = (got.double() - values.double()).abs().nan_to_num(math.inf).max().item()
            return f"{label} differs by up to {worst:.3g} at the positions checked"
    return ""


# -- digests: what forward wrote into its inputs, without a copy of them ---------------------------------------------

DIGEST_SUMS = 2  # independent weighted sums a digest holds
_MASK = (1 << 64) - 1


def _mixed(value: int) -> int:
    """splitmix64's finaliser: a well-spread 64-bit value from any."""
    value = (value + 0x9E3779B97F4A7C15) & _MASK
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK
    return value ^ (value >> 31)


class DigestKey:
    """The secret of one digest pair (before and after a forward), drawn from the system's randomness (not torch's
    generators, which forward could set or read). Element p of chunk j of a tensor is weighted, in sum k, by
    w_k(p) * m_k(j): w_k an odd hash of p made once per device (DIGEST_CHUNK int64s), m_k an odd hash of j, applied
    to the chunk's sum, so a chunk costs a conversion, a multiply and a sum per key."""

    def __init__(self) -> None:
        draw = random.SystemRandom()
        self.seeds = tuple(draw.getrandbits(64) for _ in range(DIGEST_SUMS))
        self._weights: dict[torch.device, list[torch.Tensor]] = {}

    def weights(self, device: torch.device) -> list[torch.Tensor]:
        if device not in self._weights:
            where = torch.arange(DIGEST_CHUNK, dtype=torch.int64, device=device)
            found = []
            for seed in self.seeds:
                weight = where * _signed(_mixed(seed) | 1) + _signed(_mixed(seed + 1))
                weight ^= weight >> 29
                weight *= _signed(_mixed(seed + 2) | 1)
                weight ^= weight >> 32
                found.append(weight | 1)
            self._weights[device] = found
        return self._weights[device]

    def factor(self, k: int, chunk: int) -> int:
        return _mixed(self.seeds[k] ^ _mixed(chunk + 3)) | 1


def digest_key() -> DigestKey:
    return DigestKey()


_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(piece: torch.Tensor) -> torch.Tensor:
    """The values of `piece` (1-D) as int64 bit patterns, -0.0 as 0.0 and every NaN as one NaN: equal patterns are
    equal values in `same`'s sense."""
    if piece.is_complex():
        piece = torch.view_as_real(piece).reshape(-1)
    if piece.dtype == torch.bool:
        return piece.to(torch.int64)
    if piece.is_floating_point():
        piece = (piece + 0).masked_fill_(torch.isnan(piece), math.nan)
        piece = piece.view(_BITS[piece.element_size()])
    return piece.to(torch.int64)


def _pieces(tensor: torch.Tensor, size: int):
    """`tensor`'s elements in order, as 1-D pieces of at most `size` (and the position of each piece's first): views
    where it is contiguous, else copies of a few slices along its first dimension at a time (never the whole)."""
    if tensor.is_contiguous() or tensor.dim() == 0:
        flat = tensor.reshape(-1)
        for start in range(0, flat.numel(), size):
            yield flat[start:start + size]
        return
    rows = max(1, size // max(1, tensor[0].numel()))
    for start in range(0, tensor.shape[0], rows):
        yield from _pieces(tensor[start:start + rows].reshape(-1), size)


def digest(tensor: torch.Tensor, key: DigestKey) -> tuple:
    """Weighted sums (mod 2^64) of `tensor`'s values' bits, each element's weight odd and secret (`DigestKey`): one
    element changed changes every sum (an odd weight times a nonzero difference is never 0 mod 2^64), and several
    changes cancel in all of them with odds of about 2^-64 each without the key. A chunk at a time, on the tensor's
    own device: temporaries of `memory.DIGEST_BYTES_PER_ELEMENT` a chunk's element, never the tensor's size. It
    answers `same`'s question for inputs of gigabytes that a clone would double."""
    sums = [0] * DIGEST_SUMS
    for j, piece in enumerate(_pieces(tensor.detach(), DIGEST_CHUNK)):
        bits = _bits(piece)
        for k, weight in enumerate(key.weights(bits.device)):
            part = int(_weighted_sum(bits, weight[:bits.numel()])) & _MASK
            sums[k] = (sums[k] + part * key.factor(k, j)) & _MASK
    return (tuple(tensor.shape), tensor.dtype, *sums)


def _weighted_sum(bits: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """sum(bits * weight) in int64, wrapping: torch.dot on the CPU (a tenth of the time), a product and a sum on a
    GPU (whose dot has no integer kernel)."""
    return torch.dot(bits, weight) if bits.device.type == "cpu" else torch.sum(bits * weight)


def _signed(value: int) -> int:
    """A 64-bit constant as the int64 torch multiplies by (arithmetic wraps mod 2^64 either way)."""
    value &= _MASK
    return value - (1 << 64) if value >= 1 << 63 else value


def digests(values: list[Any], key: DigestKey) -> list[Any]:
    """Each input's digest (None for what is not a tensor: numbers are passed by value)."""
    return [digest(v, key) if isinstance(v, torch.Tensor) else None for v in values]


def handed(values: list[torch.Tensor]) -> list[torch.Tensor]:
    """Outputs as forward returned them, for a hand-over that comes before any later forward of the same worker (the
    lean path): no copy, except of what is not contiguous (CUDA IPC describes contiguous tensors) or is a view into a
    larger storage (a file would hold all of that storage)."""
    found = []
    for value in values:
        value = value.detach()
        tight = value.untyped_storage().nbytes() == value.numel() * value.element_size()
        found.append(value if value.is_contiguous() and value.storage_offset() == 0 and tight else
                     value.clone(memory_format=torch.contiguous_format))
    return found
