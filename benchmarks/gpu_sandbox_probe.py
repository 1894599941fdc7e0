"""Which part of the worker's sandbox keeps CUDA from starting, on a GPU machine: one short device call.

On the H100 of 2026-12-07 (0f95c90) CUDA failed inside every sandboxed worker with `cudaGetDeviceCount() ... Error
304: OS call failed or operation not supported on this OS`, as root and as nobody, where at 023c6bf (the whole root
shown read-only, no socket filter for a root worker) it started. Issue 34 changed two things since: the view (only
the system's folders and the runtime's) and the seccomp filter (no AF_UNIX or AF_VSOCK sockets, no io_uring). Since
then a GPU worker's filter allows AF_UNIX until CUDA has started (the driver may look for an MPS server through a
unix socket), then closes on every thread. This starts CUDA in sandboxes that differ in one part at a time, says
whether unix sockets are refused after the close and CUDA still works, and, where strace is installed, lists the
calls that failed in the sandbox as the checks make it. (CUDA started in every worker at 83b34de, H100, 2026-12-07.)

Then CUDA IPC between two sandboxes, as a check passes a solution's outputs to the reference worker: one worker
shares a tensor (`verify.share`), the files it wrote into its /dev/shm are handed to the other's (all of them, as
`handover.hand_shared` hands those of its names), and the other opens it (`verify.receive`); for each pair of uids,
the sharer undumpable or not, and both in one sandbox. At 83b34de and 1a5a397 a nobody solution's outputs could not
be opened (`mapping of buffer object failed`) where root's could, dumpable or not; the table lists the sharer's
files and which of them the harness's name pattern takes (the suspect: it took decimal fields only, and the fields
are hexadecimal). Run from the repo root:

    python benchmarks/gpu_sandbox_probe.py [--out DIR]

It writes a table (variant, uid, whether CUDA started, the error) to stdout and DIR/sandbox_probe.md. The variants
are made by swapping the functions `harness.sandbox` reads (its view's paths, its filter), in this process only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from dice_lsp.harness import handover, sandbox, seccomp

START_CUDA = r'''
import json, os
import dice_lsp.harness.sandbox as s
s.become_from_environment()
said = {"uid": os.getuid()}
try:
    import torch
    torch._C._cuda_init()
    said["devices"] = torch.cuda.device_count()
    said["sum"] = float(torch.ones(1 << 10, device="cuda").sum())
    import socket
    import dice_lsp.harness.worker as worker
    worker.close_unix_after_cuda()  # as a GPU worker does before its first command
    try:
        socket.socket(socket.AF_UNIX).close()
        said["unix after"] = "made"
    except OSError as error:
        said["unix after"] = error.errno
    said["sum after"] = float(torch.full((1 << 20,), 2.0, device="cuda").sum())  # CUDA goes on without the door
except Exception as error:  # the driver's reason is what this probe is for
    said["error"] = str(error).strip().splitlines()[0][:300]
print("PROBE " + json.dumps(said))
'''


SHARE = r"""
import ctypes, json, os, subprocess, sys
import dice_lsp.harness.sandbox as s
s.become_from_environment()
ctypes.CDLL(None).prctl(4, int(os.environ["PROBE_DUMPABLE"]), 0, 0, 0)  # PR_SET_DUMPABLE
inside = None
if os.environ.get("PROBE_INSIDE"):  # the opener in this sandbox, started before this one closes unix sockets
    inside = subprocess.Popen([sys.executable, "-c", os.environ["PROBE_OPEN"]], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
import torch
from dice_lsp.harness import verify, worker
worker.close_unix_after_cuda()
x = torch.full((1 << 20,), 3.0, device="cuda")
described = json.dumps(verify.share([x]))
shm = []
for name in sorted(os.listdir("/dev/shm")):
    st = os.lstat("/dev/shm/" + name)
    shm.append(f"{name} uid {st.st_uid} mode {st.st_mode & 0o7777:o} {st.st_size} B")
print("SHM " + json.dumps(shm), flush=True)
if inside is not None:
    said, _ = inside.communicate(described + "\n", timeout=120)
    print(said, flush=True)
else:
    print("SHARED " + described, flush=True)
    sys.stdin.readline()  # alive until the other has read it
"""

OPEN = r"""
import json, os, sys
import dice_lsp.harness.sandbox as s
s.become_from_environment()
import torch
from dice_lsp.harness import verify, worker
worker.close_unix_after_cuda()
torch.empty(1, device="cuda")
said = {"uid": os.getuid(), "pid": os.getpid()}
print("READY", flush=True)
try:
    said["sum"] = float(verify.receive(json.loads(sys.stdin.readline()))[0].sum())
except Exception as error:
    said["error"] = str(error).strip().splitlines()[0][:300]
print("PROBE " + json.dumps(said), flush=True)
"""


def _line(process: subprocess.Popen, prefix: str, seen: list[str]) -> str:
    """The rest of the first line of `process` that starts with `prefix` ("" when it ends first)."""
    for line in process.stdout:
        seen.append(line)
        if line.startswith(prefix):
            return line[len(prefix):].strip()
    return ""


def _answer(text: str) -> dict:
    answers = [line for line in text.splitlines() if line.startswith("PROBE ")]
    return json.loads(answers[-1][len("PROBE "):]) if answers else {"error": "no answer"}


def ipc(found: sandbox.Availability, sharer: int, opener: int, dumpable: bool, inside: bool = False) -> dict:
    """CUDA IPC of a tensor from one sandboxed worker (uid `sharer`) to another (uid `opener`), the files CUDA and
    torch wrote into the sharer's /dev/shm handed over to the opener's as the harness does (`handover.hand_shared`),
    or, `inside`, both in one sandbox (one /dev/shm). The sum the opener read is 3 * 2**20 where it worked."""
    def env(user: int) -> dict:
        return sandbox.scrub(dict(os.environ)) | ({sandbox.USER_VARIABLE: str(user)} if user else {})
    popen = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    process, sharer_pid = sandbox.spawn(
        [sys.executable, "-c", SHARE], sandbox.Room(scratch_mb=64, gpu=True, user=sharer), found.tool,
        env(sharer) | {"PROBE_DUMPABLE": str(int(dumpable)), "PROBE_OPEN": OPEN, **({"PROBE_INSIDE": "1"} if inside else {})},
        **popen)
    seen: list[str] = []
    opening = None
    try:
        shm = _line(process, "SHM ", seen)
        if inside:
            said, _ = process.communicate(timeout=120)
            return _answer(said) | {"shm": shm, "output": ("".join(seen) + said)[-2000:]}
        described = _line(process, "SHARED ", seen)
        if not described:
            return {"error": f"the sharing worker said no handle (exit {process.wait()})", "output": "".join(seen)}
        opening, opener_pid = sandbox.spawn([sys.executable, "-c", OPEN],
                                            sandbox.Room(scratch_mb=64, gpu=True, user=opener, pid1=False),
                                            found.tool, env(opener), **popen)
        ready: list[str] = []
        if _line(opening, "READY", ready) == "" and not any(line.startswith("READY") for line in ready):
            return {"error": "the opener did not start", "shm": shm, "output": "".join(ready)[-2000:]}
        source, target = Path(f"/proc/{sharer_pid}/root/dev/shm"), Path(f"/proc/{opener_pid}/root/dev/shm")
        handed = []
        for name in sorted(os.listdir(source)):
            if handover._copy_regular(source / name, target / name, sandbox.SHM_MB << 20):
                if opener:
                    os.chown(target / name, opener, opener)
                handed.append(name)
        said, _ = opening.communicate(described + "\n", timeout=120)
        return _answer(said) | {"shm": shm, "handed": handed, "output": ("".join(ready) + said)[-2000:]}
    except subprocess.TimeoutExpired:
        return {"error": "timed out after 120 s", "output": "".join(seen)[-2000:]}
    finally:
        for running in (process, opening):
            if running is not None:
                running.kill()
                running.wait()


def attempt(found: sandbox.Availability, user: int, argv: list[str] | None = None) -> dict:
    room = sandbox.Room(scratch_mb=256, gpu=True, user=user)
    env = sandbox.scrub(dict(os.environ)) | ({sandbox.USER_VARIABLE: str(user)} if user else {})
    argv = argv or [sys.executable, "-c", START_CUDA]
    process, _pid = sandbox.spawn(argv, room, found.tool, env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True)
    try:
        said, _ = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        said, _ = process.communicate()
        return {"error": "timed out after 120 s", "output": said[-2000:]}
    lines = [line for line in said.splitlines() if line.startswith("PROBE ")]
    if not lines:
        return {"error": f"no answer (exit {process.returncode})", "output": said[-2000:]}
    return json.loads(lines[-1][len("PROBE "):]) | {"output": said[-2000:]}


class Swapped:
    """A variant: swap `sandbox.<name>` for the length of a `with`."""

    def __init__(self, **swaps) -> None:
        self.swaps = swaps
        self.kept: dict = {}

    def __enter__(self) -> None:
        for name, value in self.swaps.items():
            self.kept[name] = getattr(sandbox, name)
            setattr(sandbox, name, value)

    def __exit__(self, *_exc) -> None:
        for name, value in self.kept.items():
            setattr(sandbox, name, value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    args = parser.parse_args()
    found = sandbox.status()
    if not found.available:
        print(f"the sandbox cannot start here: {found.reason}")
        return 2
    nobody = found.user if os.geteuid() == 0 else 0
    strict = seccomp.program(unix=False)
    variants = [
        ("as the checks make it (AF_UNIX until CUDA started)", {}),
        ("AF_UNIX refused from the start (0f95c90)", {"seccomp_program": lambda **_: strict}),
    ]
    rows = []
    for name, swaps in variants:
        for user in dict.fromkeys((0, nobody)):
            if user and "seccomp_program" in swaps:
                continue  # as root alone
            with Swapped(**swaps):
                said = attempt(found, user)
            rows.append((name, user, said))
            print(f"{name}, uid {user}: {json.dumps({k: v for k, v in said.items() if k != 'output'})}", flush=True)
    # (sharer's uid, opener's uid, sharer dumpable, both in one sandbox): root's pair works in the checks
    pairs = [(0, 0, True, False), (nobody, nobody, False, False), (nobody, nobody, True, False),
             (nobody, 0, False, False), (0, nobody, True, False), (nobody, nobody, False, True)]
    shares = []
    for sharer, opener, dumpable, inside in dict.fromkeys(pairs):
        said = ipc(found, sharer, opener, dumpable, inside)
        shares.append((sharer, opener, dumpable, inside, said))
        print(f"CUDA IPC, uid {sharer} to {opener}, sharer dumpable {dumpable}, one sandbox {inside}: "
              f"{json.dumps({k: v for k, v in said.items() if k != 'output'})}", flush=True)
    strace = shutil.which("strace")
    traced = ""
    if strace:
        # Traced in the sandbox as the checks make it, as root; the trace stays in its /tmp, so it is read there.
        # Failed calls but the imports' searches (a missing file the driver wanted is among the rest)
        script = (f"{strace} -f -qq -o /tmp/cuda.strace -e trace=%file,%network,%ipc,ioctl,prctl "
                  f"{sys.executable} -c \"$0\"; grep -E '= -1 E' /tmp/cuda.strace | "
                  "grep -v -E 'python|[.]py|site-packages|torch|[.]so|ENOTTY' | tail -80")
        traced = attempt(found, 0, ["/bin/sh", "-c", script, START_CUDA]).get("output", "")
    lines = ["| variant | uid | CUDA | unix socket after the close | CUDA after it | error |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, user, said in rows:
        lines.append(f"| {name} | {user} | {'started' if 'error' not in said else 'failed'} | "
                     f"{said.get('unix after', '')} | {said.get('sum after', '')} | "
                     f"{said.get('error', '').replace('|', '/')} |")
    lines += ["", "CUDA IPC between sandboxed workers, the sharer's /dev/shm files handed over as the harness does "
              "(3145728.0: the opener read the sharer's tensor):", "",
              "| sharer's uid | opener's uid | sharer dumpable | one sandbox | sum the opener read | error | "
              "sharer's /dev/shm | of those, what the harness hands over |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for sharer, opener, dumpable, inside, said in shares:
        names = [entry.split(" ")[0] for entry in json.loads(said.get("shm") or "[]")]
        harness = [n for n in names if handover._SHARED_NAME.fullmatch(n)]
        lines.append(f"| {sharer} | {opener} | {int(dumpable)} | {int(inside)} | {said.get('sum', '')} | "
                     f"{said.get('error', '').replace('|', '/')} | {said.get('shm', '')} | {harness} |")
    text = "\n".join(lines) + "\n"
    if traced:
        text += "\nstrace of the failing start, the calls that failed:\n\n```\n" + traced[-6000:] + "\n```\n"
    elif not strace:
        text += "\n(no strace on this machine)\n"
    text += "\nOutputs:\n\n" + "\n".join(f"- {name}, uid {user}: `{said.get('output', '')[-600:]}`"
                                        for name, user, said in rows if "error" in said)
    text += "\n" + "\n".join(f"- CUDA IPC, uid {a} to {b}, dumpable {int(d)}, one sandbox {int(i)}: "
                              f"`{said.get('output', '')[-600:]}`" for a, b, d, i, said in shares if "error" in said)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "sandbox_probe.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
