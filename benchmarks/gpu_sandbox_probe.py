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
shares a tensor (`verify.share`), another opens it (`verify.receive`), both root or both nobody, the sharing one
undumpable or not. At 83b34de a nobody solution's outputs could not be opened (`mapping of buffer object failed`)
where root's could; a process whose uid changed is left undumpable by the kernel, which is the difference the
variants test. Run from the repo root:

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

from dice_lsp.harness import sandbox, seccomp

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


SHARE = r'''
import ctypes, json, os, sys
import dice_lsp.harness.sandbox as s
s.become_from_environment()
ctypes.CDLL(None).prctl(4, int(os.environ["PROBE_DUMPABLE"]), 0, 0, 0)  # PR_SET_DUMPABLE
import torch
from dice_lsp.harness import verify, worker
worker.close_unix_after_cuda()
x = torch.full((1 << 20,), 3.0, device="cuda")
print("SHARED " + json.dumps(verify.share([x])), flush=True)
sys.stdin.readline()  # alive until the other has read it
'''

OPEN = r'''
import json, os, sys
import dice_lsp.harness.sandbox as s
s.become_from_environment()
import torch
from dice_lsp.harness import verify, worker
worker.close_unix_after_cuda()
said = {"uid": os.getuid()}
try:
    said["sum"] = float(verify.receive(json.loads(sys.stdin.readline()))[0].sum())
except Exception as error:
    said["error"] = str(error).strip().splitlines()[0][:300]
print("PROBE " + json.dumps(said), flush=True)
'''


def ipc(found: sandbox.Availability, user: int, shared_dumpable: bool) -> dict:
    """CUDA IPC from one sandboxed worker to another, both `user`: the sum of what the opener sees (3 * 2**20)."""
    env = sandbox.scrub(dict(os.environ)) | ({sandbox.USER_VARIABLE: str(user)} if user else {})
    sharer, _ = sandbox.spawn([sys.executable, "-c", SHARE], sandbox.Room(scratch_mb=64, gpu=True, user=user),
                              found.tool, env | {"PROBE_DUMPABLE": str(int(shared_dumpable))},
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        for line in sharer.stdout:
            lines.append(line)
            if line.startswith("SHARED "):
                break
        else:
            return {"error": f"the sharing worker said no handle (exit {sharer.wait()})", "output": "".join(lines)}
        opener, _ = sandbox.spawn([sys.executable, "-c", OPEN],
                                  sandbox.Room(scratch_mb=64, gpu=True, user=user, pid1=False), found.tool, env,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        said, _ = opener.communicate(line[len("SHARED "):], timeout=120)
        answers = [text for text in said.splitlines() if text.startswith("PROBE ")]
        if not answers:
            return {"error": f"no answer (exit {opener.returncode})", "output": said[-2000:]}
        return json.loads(answers[-1][len("PROBE "):]) | {"output": said[-2000:]}
    except subprocess.TimeoutExpired:
        return {"error": "timed out after 120 s"}
    finally:
        sharer.kill()
        sharer.wait()


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
    shares = []
    for user, shared_dumpable in dict.fromkeys(((0, True), (nobody, False), (nobody, True))):
        said = ipc(found, user, shared_dumpable)
        shares.append((user, shared_dumpable, said))
        print(f"CUDA IPC, uid {user}, sharer dumpable {shared_dumpable}: "
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
    lines += ["", "CUDA IPC between two sandboxed workers (3145728.0: the opener read the sharer's tensor):", "",
              "| uid of both | sharer dumpable | sum the opener read | error |", "| --- | --- | --- | --- |"]
    for user, shared_dumpable, said in shares:
        lines.append(f"| {user} | {int(shared_dumpable)} | {said.get('sum', '')} | "
                     f"{said.get('error', '').replace('|', '/')} |")
    text = "\n".join(lines) + "\n"
    if traced:
        text += "\nstrace of the failing start, the calls that failed:\n\n```\n" + traced[-6000:] + "\n```\n"
    elif not strace:
        text += "\n(no strace on this machine)\n"
    text += "\nOutputs:\n\n" + "\n".join(f"- {name}, uid {user}: `{said.get('output', '')[-600:]}`"
                                        for name, user, said in rows if "error" in said)
    text += "\n" + "\n".join(f"- CUDA IPC, uid {user}, dumpable {int(d)}: `{said.get('output', '')[-600:]}`"
                              for user, d, said in shares if "error" in said)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "sandbox_probe.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
