"""A worker process: runs one side (reference or solution) of a check, one stage per command from its parent.

Commands arrive as JSON lines on stdin; each reply is one JSON line on the file descriptor named in argv.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import resource
import sys
import time
import traceback
from typing import Any, Callable

# Before torch loads OpenMP: idle intra-op threads sleep at once instead of spinning after a parallel region, which
# the CPU clock (the whole process's, `timing.cpu_seconds`) would count into the next timed call
os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

from dice_lsp.harness import timing  # noqa: E402,F401  (binds the clocks before any candidate code is imported)

import torch

from dice_lsp.harness import messages, sandbox, stages, timed
from dice_lsp.harness.side import Side

# The command table: which stage answers each command.
STAGES: dict[type[messages.Command], Callable[[Side, Any], messages.Reply]] = {
    messages.Build: stages.build,
    messages.Prepare: stages.prepare,
    messages.Compile: stages.compile_call,
    messages.MakeReference: stages.reference,
    messages.RunSolution: stages.run,
    messages.SaveOutputs: stages.save_outputs,
    messages.Compare: stages.compare,
    messages.Inspect: stages.inspect,
    messages.Time: timed.time,
    messages.Snapshot: timed.snapshot,
    messages.CompareTimed: timed.compare_timed,
}
stages.SEAL.take()  # every stage loaded, none of the candidate's code yet: what `Seal.broken` holds them to


def apply_limits(limits: messages.Limits) -> None:
    """Resource limits for this process and everything it starts, hard ones (soft = hard), so code of the
    candidate's cannot raise them again: file size, CPU time, processes where the caller asks (it counts the
    user's processes; a pids cgroup does the job where one can be made), no core files, and the address space
    without CUDA (a CUDA context reserves terabytes of addresses; a memory cgroup limits those workers)."""
    def cap(kind: int, value: int) -> None:
        _soft, hard = resource.getrlimit(kind)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(kind, (value, value))

    if limits.file_size_mb:
        cap(resource.RLIMIT_FSIZE, limits.file_size_mb << 20)
    if limits.cpu_time_s:
        cap(resource.RLIMIT_CPU, limits.cpu_time_s)
    if limits.processes:
        cap(resource.RLIMIT_NPROC, limits.processes)
    if limits.memory_gb and not limits.cuda:
        cap(resource.RLIMIT_AS, int(limits.memory_gb * (1 << 30)))
    cap(resource.RLIMIT_CORE, 0)


def undumpable() -> None:
    """A reference worker holds the expected outputs: no process of the same user may read its memory or attach
    to it (PR_SET_DUMPABLE 0), in case the candidate's worker could see it at all (without the sandbox)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass


def exchanger(reply: Any) -> Callable[[messages.Reply], messages.Command]:
    """How a stage asks the caller while its command runs: an interim reply (`BuildRequest`, `Called`) on the reply
    pipe, and the caller's answer read from stdin (`BuildAnswer`, `Next`)."""
    def exchange(interim: messages.Reply) -> messages.Command:
        reply.write(messages.encode_reply(interim) + "\n")
        reply.flush()
        return messages.decode_command(sys.stdin.readline())
    return exchange


def warm_up_cuda(device: str) -> str:
    """What the GPU stages need, done before the first command, so a spare waiting for its check pays it while idle:
    the CUDA context of `device` ("auto", "cuda", "cuda:N"), and the modules the profiler (inspect) and torch.compile
    import on first use (torch._inductor and torch._dynamo: ~3 s). Importing attaches no profiler hooks.
    A failure is left to the stage that needs the GPU, which reports it; it is returned for benchmarks to show."""
    try:
        if torch.cuda.is_available():
            torch.empty(1, device="cuda" if device == "auto" else device)  # the context and the allocator's first block
            # Only here, not at the top: a worker that builds or runs on the CPU never needs these ~3 s of imports.
            # Bound to a name of its own: a bare `import torch._inductor` would make `torch` local to this function
            import torch._inductor as inductor  # noqa: F401
    except Exception as error:  # the stage that uses CUDA reports it
        return f"{type(error).__name__}: {error}"
    return ""


def close_unix_after_cuda() -> None:
    """A GPU worker: the driver starts (cuInit) while the filter still allows the unix socket it may make, then no
    thread may make one (`sandbox.close_unix`), before the first command, so before any candidate code."""
    if sandbox.unix_open():
        torch.cuda.is_available()
        sandbox.close_unix()


def main() -> int:
    reply = os.fdopen(int(sys.argv[1]), "w", buffering=1)
    sandbox.become_from_environment()  # before any command: a root caller's candidates never run as root
    limits = messages.decode_limits(os.environ.get(messages.LIMITS_VARIABLE, "{}"))
    apply_limits(limits)
    if limits.role == "reference":
        undumpable()
    started = time.perf_counter()
    warm = warm_up_cuda(limits.warm_device) if limits.warm_device else ""
    close_unix_after_cuda()
    warm_seconds = time.perf_counter() - started

    side = Side()
    side.exchange = exchanger(reply)
    for line in sys.stdin:
        started, modules = time.perf_counter(), len(sys.modules)
        answer = answer_to(side, line)
        # Where a stage's time went, for benchmarks: this command alone, and how many modules it imported.
        cost = messages.Cost(seconds=time.perf_counter() - started, imported=len(sys.modules) - modules,
                             warm_up_seconds=warm_seconds, warm_up_error=warm)
        reply.write(encode(dataclasses.replace(answer, cost=cost, refused=sandbox.refused()), side) + "\n")
        reply.flush()
    return 0


def answer_to(side: Side, line: str) -> messages.Reply:
    """The stage's reply to one command line; `Failed` when it does not decode or its stage raises."""
    try:
        command = messages.decode_command(line)
        return STAGES[type(command)](side, command)
    except BaseException as error:  # the candidate may raise anything, SystemExit included
        return failed(side, error)


def failed(side: Side, error: BaseException) -> messages.Failed:
    built = tuple(side.builder.extensions) if side.builder is not None else ()
    return messages.Failed(error=f"{type(error).__name__}: {error}"[-8000:], traceback=traceback.format_exc()[-8000:],
                           extensions=built)


def encode(answer: messages.Reply, side: Side) -> str:
    """The reply's JSON line; a reply that cannot be encoded (a value of the candidate's that JSON cannot hold)
    becomes the `Failed` saying so."""
    try:
        return messages.encode_reply(answer)
    except (TypeError, ValueError) as error:
        return messages.encode_reply(dataclasses.replace(failed(side, error), cost=answer.cost))


if __name__ == "__main__":
    sys.exit(main())
