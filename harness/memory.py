"""What a check holds in memory at once, on each side and in each stage, from the sizes the reference worker measured:
the plan a check runs by, and whether it fits its GPU (on the CPU: the host, and each worker's address-space limit).

A check runs the same checks in one of two ways. "exact" keeps full copies: each trial's inputs cloned before forward
(what forward wrote into), two trials' inputs kept to mix the timed calls' inputs, the first trial's inputs kept for the
changed-inputs trial and the timing: cheap for small problems, four to six inputs' worth for large ones. "lean" holds
what one trial needs at a time: digests of the inputs instead of clones (`verify.digest`), the timed calls' inputs
mixed from trials made again from their seeds (`timing.SeededBases`), a trial a call (the changed-inputs trial right
after the first), outputs handed over without a copy where no later forward could reuse them, comparisons in chunks.
A check is lean when one trial's inputs and outputs pass LEAN_FROM, or when its exact plan does not fit.

Pure: no torch, no processes. Sizes in bytes; `Sizes` comes from the reference worker (`messages.ReferenceMade`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dice_lsp.harness.samples import PLACEMENTS

Mode = Literal["exact", "lean"]
GB = 1e9

LEAN_FROM = 1 << 30  # one trial's inputs and outputs from which a check is lean whatever fits
GPU_SHARE = 0.95  # of a GPU's memory, what dice's checks on it may plan to use together
HOST_SHARE = 0.8  # of the host's memory, the same on the CPU (the caller, the editor and other jobs need the rest)
CONTEXT_BYTES = 1 << 30  # a GPU worker's CUDA context, library workspaces and the allocator's rounding, besides trials
WORKER_MARGIN = 512 << 20  # on the CPU, what a worker's address space grows by besides trials (arenas, the extension)

# The comparison's and the digest's temporaries, per element of the chunk they work on (`verify`): float64 copies of
# both sides, the error, the bound, masks; the digest's int64 bits, weights, products and positions
COMPARE_CHUNK = 1 << 23
COMPARE_BYTES_PER_ELEMENT = 56
DIGEST_CHUNK = 1 << 22
DIGEST_BYTES_PER_ELEMENT = 40

# The exact path's own bounds (kept here, its one owner; `stages` and `timing` read them)
BASE_BYTES = 512 << 20  # trials' inputs kept for the timed calls to mix, past two trials
# Each trial's inputs stay alive until every trial of a call ran while they fit this (`stages.run`): a forward that
# keys a cache by pointers then meets new pointers every trial, as it would with inputs held by a caller, and only
# the changed inputs (same pointers, new values) catch it as "output-cached". Past it (GB inputs), a trial's memory
# goes before the next's.
HELD_BYTES = 1 << 30
PLACEMENT_BYTES = 64 << 20  # copies of the timed inputs in other allocations (`timing.placements`), outputs held back
SNAPSHOT_SHARE = 0.05  # of the GPU's memory, what a reference worker keeps of timed calls' copies on the GPU
TIMED_COPIES = 8  # kept timed calls a check compares (2 a round, 4 rounds)


@dataclass(frozen=True)
class Sizes:
    """One trial of a problem, as the reference worker measured it."""

    inputs: int = 0  # one trial's input tensors
    outputs: int = 0  # one trial's outputs
    forward: int = 0  # the reference's forward at its peak, above its inputs (its outputs included)
    output_elements: int = 0  # of all outputs (the comparison's chunks)
    input_elements: int = 0  # of all inputs (the digest's chunks)
    params: int = 0  # the model's parameters and buffers, on each side
    kept: int = 0  # what the reference worker keeps between checks (small problems' inputs and expected outputs)

    @property
    def trial(self) -> int:
        return self.inputs + self.outputs


@dataclass(frozen=True)
class Device:
    """The device a reference worker ran on, as it saw it."""

    key: str = ""  # "cuda:<the GPU's UUID>", or "host" on the CPU: what checks that share memory have in common
    total: int = 0  # its memory: the GPU's, or the host's
    start_vm: int = 0  # the worker's address space before any trial (CPU: its limit counts it)
    start_rss: int = 0  # the worker's resident host memory before any trial


@dataclass(frozen=True)
class Room:
    """Where a check runs and what it may use there."""

    device: str  # "cuda" or "cpu"
    total: int  # bytes every check on this device may plan together (GPU_SHARE of the GPU, HOST_SHARE of the host)
    card: int = 0  # the device's whole memory, for messages
    per_worker: int = 0  # CPU: what one worker may hold besides its start (its address-space limit less that); 0: any
    overhead: int = 0  # what each worker holds before any trial (a CUDA context; the interpreter and torch)
    handover: int = 0  # CPU: the largest file the solution's outputs may travel in (its scratch, its file limit); 0: any
    limit: int = 0  # CPU: each worker's address-space limit, for messages


@dataclass(frozen=True)
class Need:
    """What each worker holds at the peak of one stage, trials only (`Room.overhead` comes on top)."""

    stage: str
    reference: int
    solution: int
    shared: int = 0  # held by neither worker's own memory: the CPU's outputs file in the solution's scratch tmpfs

    @property
    def total(self) -> int:
        return self.reference + self.solution + self.shared


@dataclass(frozen=True)
class Plan:
    """How a check runs (`mode`, `at_once` trials a call) and what it holds, stage by stage, against its `room`."""

    mode: Mode
    at_once: int  # trials a call of the solution's worker; 0: all in one
    needs: tuple[Need, ...]
    room: Room
    sizes: Sizes
    trials: int = 1

    @property
    def handed(self) -> int:
        """The outputs one call of the solution's worker hands over (the CPU: in one file)."""
        calls = self.trials + 1 if self.at_once <= 0 else min(self.at_once, self.trials)
        return calls * self.sizes.outputs

    @property
    def peak(self) -> Need:
        """The stage holding the most at once, both workers and their overhead together."""
        return max(self.needs, key=lambda n: n.total)

    @property
    def total(self) -> int:
        """Bytes the check holds at its peak on its device, both workers' overhead included: what it reserves."""
        return self.peak.total + 2 * self.room.overhead

    def side(self, name: str) -> int:
        """The most one worker ("reference" or "solution") holds in any stage, trials only."""
        return max(getattr(n, name) for n in self.needs)

    def worst_side(self) -> tuple[str, int]:
        return max((("reference", self.side("reference")), ("solution", self.side("solution"))), key=lambda s: s[1])

    @property
    def fits(self) -> bool:
        return not self.refusal()

    def refusal(self) -> str:
        """"" when the check fits its room; else why not, in numbers a user can act on."""
        s, room = self.sizes, self.room
        where = "this GPU" if room.device == "cuda" else "this machine"
        trial = (f"one trial's inputs take {s.inputs / GB:.2f} GB and its outputs {s.outputs / GB:.2f} GB, the "
                 f"reference's forward {s.forward / GB:.2f} GB at its peak above its inputs")
        way = f"checked {self.mode} ({_WAYS[self.mode]})"
        if room.handover and self.handed > room.handover:
            return (f"this problem does not fit {where}: {trial}; {way}, on the CPU the solution's outputs reach the "
                    f"reference through a file in its scratch folder, {self.handed / GB:.2f} GB a call, which holds "
                    f"{room.handover / GB:.2f} GB (scratch_limit_mb and file_size_limit_mb bound it). Raise those "
                    "options, or make get_inputs smaller")
        if room.per_worker:
            name, held = self.worst_side()
            if held > room.per_worker:
                return (f"this problem does not fit {where}: {trial}; {way}, the {name}'s worker holds "
                        f"{held / GB:.2f} GB at its peak and may hold {room.per_worker / GB:.2f} GB (its memory limit "
                        f"of {room.limit / GB:.2f} GB less {(room.limit - room.per_worker) / GB:.2f} GB it holds "
                        "before any trial). Raise memory_limit_gb, or make get_inputs smaller")
        if self.total > room.total:
            peak = self.peak
            card = f"its {room.card / GB:.1f} GB" if room.card else "its memory"
            share = GPU_SHARE if room.device == "cuda" else HOST_SHARE
            return (f"this problem does not fit {where}: {trial}; {way}, the check holds {self.total / GB:.1f} GB at "
                    f"once at its peak ({peak.stage}: reference {peak.reference / GB:.1f} GB, solution "
                    f"{peak.solution / GB:.1f} GB, {room.overhead / GB:.1f} GB a worker besides), and {where} lets a "
                    f"check use {room.total / GB:.1f} GB ({share:.0%} of {card}). Smaller inputs in get_inputs, or "
                    f"{'a GPU' if room.device == 'cuda' else 'a machine'} with more memory, would let it run")
        return ""

    def describe(self) -> str:
        """One line for the verify stage's detail."""
        peak = self.peak
        calls = "all trials in one call" if self.at_once == 0 else \
            "one trial a call" if self.at_once == 1 else f"{self.at_once} trials a call"
        return (f"{self.mode} memory plan ({calls}): {self.total / GB:.2f} GB at its peak ({peak.stage}) of "
                f"{self.room.total / GB:.1f} GB")


_WAYS = {"exact": "inputs cloned, two trials' inputs kept for the timed calls",
         "lean": "one trial a call, inputs checked by digest, no copies kept"}


def compare_bytes(elements: int) -> int:
    """The comparison's temporaries for outputs of `elements` elements (`verify.compare`, a chunk at a time)."""
    return min(elements, COMPARE_CHUNK) * COMPARE_BYTES_PER_ELEMENT


def digest_bytes(elements: int) -> int:
    """The digest's temporaries for inputs of `elements` elements (`verify.digest`, a chunk at a time)."""
    return min(elements, DIGEST_CHUNK) * DIGEST_BYTES_PER_ELEMENT


def exact_needs(s: Sizes, trials: int, at_once: int, cuda: bool, card: int) -> tuple[Need, ...]:
    """What the exact path holds (upper bounds, stage by stage): `stages.run`'s clones, bases and held inputs, the
    reference's copies for `_itself`, the timed inputs' placements, the profiled calls' outputs."""
    i, o, f, p, k = s.inputs, s.outputs, s.forward, s.params, s.kept
    c = compare_bytes(s.output_elements)
    calls = trials if at_once <= 0 else min(at_once, trials)
    bases = min(trials, max(2, BASE_BYTES // max(i, 1))) * i
    held = min(calls, HELD_BYTES // max(i, 1)) * i
    placed = i + min(i * (PLACEMENTS - 1), PLACEMENT_BYTES)
    snapshots = min(TIMED_COPIES * o, int(SNAPSHOT_SHARE * card)) if cuda else o
    handed = 0 if cuda else o  # the CPU's outputs, mapped from the file they came in
    outputs = (trials + 1 if at_once <= 0 else calls) * o  # this call's, the last one being copied
    earlier = 0 if at_once <= 0 else calls * o  # the last call's, until this call's replace them
    solution_run = p + bases + i + held + 2 * i + f + outputs + earlier
    solution_rest = p + bases + i + held + outputs
    solution_time = p + bases + placed + f + o + PLACEMENT_BYTES
    reference_time = p + k + bases + placed + f + o + snapshots
    return (
        Need("reference", p + k + i + f, p),
        Need("run", p + k, solution_run),
        Need("compare", p + k + handed + max(i + f, o + c, 3 * i + 2 * o + f + c), solution_rest,
             0 if cuda else (calls + 1) * o),
        Need("time", reference_time, solution_time),
        Need("inspect", p + k + max(bases + placed + 2 * o + i + f + snapshots + c, 2 * i + f + o),
             p + bases + placed + i + 2 * o + f),
    )


def lean_needs(s: Sizes, cuda: bool) -> tuple[Need, ...]:
    """What the lean path holds, stage by stage (the module's docstring says how it runs)."""
    i, o, f, p, k = s.inputs, s.outputs, s.forward, s.params, s.kept
    c, d = compare_bytes(s.output_elements), digest_bytes(s.input_elements)
    handed = 0 if cuda else o
    reference_compare = p + k + handed + max(i + f + d, o + c) + o  # the first trial's expected, held for `_itself`
    solution_run = p + max(i + f, 2 * i) + d
    solution_rest = p + i + o  # the first trial's inputs (for the changed trial) and the outputs handed over
    # A kept timed call, compared by the reference: its own timed inputs, the copy taken, a trial made again to mix
    # into them, the forward, the comparison (on a GPU between the solution's calls, on the CPU after the rounds).
    # A lean reference worker lets its own staging go after each of its rounds; the solution keeps its own
    timed_compare = p + k + i + o + max(i, f + c)
    reference_round, solution_round = p + k + o + max(2 * i, i + f), p + o + max(2 * i, i + f)
    resting = (p + k + i, p + i + o)  # each side between its rounds
    time = max([(reference_round, resting[1]), (resting[0], solution_round)]
               + ([(timed_compare, resting[1])] if cuda else []), key=sum)
    reference_inspect = p + k + i + f if cuda else max(p + k + i + f, timed_compare)
    return (
        Need("reference", p + k + i + f, p),
        Need("run", p + k, solution_run),
        Need("compare", reference_compare, solution_rest, 0 if cuda else o),
        Need("time", *time),
        Need("inspect", reference_inspect, p + i + f + o),
    )


def plan(sizes: Sizes, room: Room, trials: int, mode: str = "auto", at_once: int = 0) -> Plan:
    """The plan of a check of `trials` trials of a problem of `sizes` in `room`. `mode` "auto": exact while one
    trial's inputs and outputs stay under LEAN_FROM and the exact plan fits (all trials in one call, else one a
    call), else lean; "exact" or "lean" force theirs (a forced plan that does not fit says so in `refusal`).
    `at_once`: trials a call on the exact path (the option `trials_at_once`; 0: as they fit)."""
    cuda = room.device == "cuda"
    if mode != "lean":
        calls = [at_once] if at_once else [0, 1]
        for count in calls:
            exact = Plan("exact", count, exact_needs(sizes, trials, count, cuda, room.card), room, sizes, trials)
            if mode == "exact" and count == calls[-1]:
                return exact
            if exact.fits and sizes.trial <= LEAN_FROM:
                return exact
    return Plan("lean", 1, lean_needs(sizes, cuda), room, sizes, trials)


def room(device: Device, limit: int = 0, handover: int = 0) -> Room:
    """What a check may use on `device`: GPU_SHARE of a GPU (each worker's CUDA context besides), or on the CPU
    HOST_SHARE of the host and, for each worker, its address-space `limit` less what it held before any trial."""
    if device.key.startswith("cuda"):
        return Room("cuda", int(GPU_SHARE * device.total), device.total, overhead=CONTEXT_BYTES)
    per_worker = max(1, limit - device.start_vm - WORKER_MARGIN) if limit else 0
    return Room("cpu", int(HOST_SHARE * device.total), device.total, per_worker=per_worker,
                overhead=device.start_rss, handover=handover, limit=limit)
