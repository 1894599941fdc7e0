"""On a GPU machine: a GPU worker's sandbox is as strict as a CPU worker's. CUDA runs inside bubblewrap as an ordinary
user (a root caller's candidates as nobody) with the NVIDIA device nodes and nothing of /dev besides bwrap's few; its
sockets meet the same filter; and a candidate that starts processes meets the count (RLIMIT_NPROC for its user where
no pids cgroup can be made, as on the GPU machines' kernels). Run through the device tool (`pytest -m gpu`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dice_lsp import harness
from dice_lsp.harness import sandbox, view
from decoys import MANY_PROCESSES

FILES = Path(__file__).parent / "files"
pytestmark = [pytest.mark.gpu, pytest.mark.slow]
ROOT_CALLER = pytest.mark.skipif(os.geteuid() != 0, reason="a root caller's defence: any other caller's candidates "
                                                            "run as that caller, whom the kernel limits already")

CUDA_INSIDE = '''
import json, os, socket
import torch
x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
total = float((x * 2).sum())
import dice_lsp.harness.worker as worker
worker.close_unix_after_cuda()  # as a GPU worker does once CUDA has started, before any candidate code
try:
    socket.socket(socket.AF_UNIX)
    unix = "made"
except OSError as error:
    unix = error.errno
print(json.dumps({"uid": os.getresuid(), "total": total, "device": torch.cuda.get_device_name(0),
                  "dev": sorted(os.listdir("/dev")), "unix": unix}))
'''


@ROOT_CALLER
def test_cuda_runs_in_the_sandbox_as_nobody_with_only_the_gpus_nodes():
    found = sandbox.status()
    assert found.available and found.user, (found.reason, found.root_note)
    assert view.gpu_nodes_open_to_all(), view.gpu_nodes()
    room = sandbox.Room(scratch_mb=64, gpu=True, user=found.user)
    env = sandbox.scrub(dict(os.environ)) | {sandbox.USER_VARIABLE: str(found.user)}
    script = "import dice_lsp.harness.sandbox as s; s.become_from_environment()\n" + CUDA_INSIDE
    process, _pid = sandbox.spawn([sys.executable, "-c", script], room, found.tool, env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
    said, _ = process.communicate(timeout=300)
    seen = json.loads(said.strip().splitlines()[-1])
    assert seen["uid"] == [found.user] * 3, said
    assert seen["total"] == float(sum(range(1 << 20)) * 2), said
    assert seen["unix"] == 1, said  # EPERM: the filter holds on the GPU machine too
    gpu = {os.path.basename(n) for n in view.gpu_nodes()}
    standard = {"null", "zero", "full", "random", "urandom", "tty", "console", "shm", "pts", "ptmx", "fd", "stdin",
                "stdout", "stderr", "core", "mqueue"}
    assert set(seen["dev"]) <= gpu | standard | {"nvidia-caps"}, seen["dev"]




@pytest.fixture(scope="module")
def gpu_options(options):
    return options.with_(device="auto", baseline="eager", timing_trials=20, sandbox="require")


@ROOT_CALLER
def test_a_gpu_candidate_is_nobody_and_meets_the_process_count(files, gpu_options):
    """The unprivileged GPU path (`unprivileged_gpu`; passing here is what turns it on by default): the solution is
    not root, its processes are counted, its kernel is still timed and profiled, its outputs still reach the
    reference by CUDA IPC."""
    report = harness.check(files.text("add_reference.py"), MANY_PROCESSES + files.text("cuda_solution.py"),
                           gpu_options.with_(process_limit=64, unprivileged_gpu=True))
    assert "ESCAPED" not in report.message + (report.log or ""), report.message
    assert report.status == "correct", (report.summary(), report.message, (report.log or "")[-3000:])
    assert "unsandboxed" not in [f.code for f in report.findings], report.findings
    assert [k.name for k in report.kernels if k.own] == ["add_kernel"], report.kernels
    assert next(s.detail for s in report.stages if s.name == "verify").endswith("outputs by CUDA IPC")
