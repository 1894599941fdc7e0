"""Workers as the caller sees them: a pool of the caller's own, reference workers kept one per key, a reply that does
not decode ending as a clean "crashed" report, and the CUDA toolkit named by the options reaching the build.

Real worker processes on the CPU; nothing here builds an extension.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from dice_lsp import harness
from dice_lsp.harness import Options, messages, process
from dice_lsp.harness.pool import KeptReference

SOLUTION = """import torch


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return a + b
"""


def kept_entry(options: Options) -> KeptReference:
    """A reference worker as a check leaves it: its reference stage answered, an exchange folder of its own."""
    made = messages.ReferenceMade(device="cpu", tf32=False, cudnn_tf32=True, matmul_precision="highest",
                                  dtypes=("torch.float32",))
    return KeptReference(process.Worker(options, warm=False), tempfile.mkdtemp(prefix="dice-exchange-"), made)


def test_keeping_a_reference_again_for_its_key_closes_the_one_it_replaces(options):
    """Two checks of one reference at once ("Save All") each end with a reference worker for the same key: the one
    kept first is closed, never orphaned."""
    pool = harness.WorkerPool()
    pool.keep_warm(1)
    first, second = kept_entry(options), kept_entry(options)
    try:
        pool.keep_reference(("same",), first)
        pool.keep_reference(("same",), second)
        assert list(pool.kept.values()) == [second]
        assert first.worker.process.poll() is not None and not Path(first.exchange).exists()
        assert second.worker.process.poll() is None
        pool.keep_reference(("same",), second)  # the same entry again: kept, not closed
        assert list(pool.kept.values()) == [second] and second.worker.process.poll() is None
    finally:
        pool.close()
    assert second.worker.process.poll() is not None and not Path(second.exchange).exists()


def test_a_pool_that_keeps_no_spares_keeps_no_reference_either(options):
    pool = harness.WorkerPool()
    entry = kept_entry(options)
    pool.keep_reference(("key",), entry)
    assert not pool.kept and entry.worker.process.poll() is not None


JUNK = {  # what the candidate writes (a Python expression), what the report then says
    "not json": (repr(b"\x00not json at all\n"), "not JSON"),
    "endless": (f"b'x' * {process.MAX_REPLY_BYTES + (1 << 20)}", "a line over 32 MiB"),
    "another command's reply": (repr(b'{"reply": "prepared", "header": "h"}\n'), "a prepared reply to a build command"),
    "ill-typed": (repr(b'{"reply": "built", "extensions": 7, "arch": "", "cuda_available": true, '
                       b'"has_model_new": true}\n'), "built.extensions is int, not an array"),
}


@pytest.mark.parametrize("attack", sorted(JUNK))
def test_a_reply_that_does_not_decode_is_a_crashed_report(files, options, attack):
    """The candidate writes on its worker's reply pipe while it is imported: the caller reports what it read, cut
    short, and ends that worker."""
    written, says = JUNK[attack]
    prelude = f"import os, sys\nos.write(int(sys.argv[1]), {written})\n"
    pool = harness.WorkerPool()
    report = harness.check(files.text("add_reference.py"), prelude + SOLUTION, options, pool=pool)
    assert report.status == "crashed", (report.status, report.message)
    assert "does not decode" in report.message and says in report.message and len(report.message) < 600
    assert [f.code for f in report.findings] == ["crash"] and "during build" in report.findings[0].message
    assert not pool.spares() and not pool.kept


def test_a_worker_for_the_gpu_warms_up_before_its_first_command(options, unknown_command):
    """Its warm-up (the CUDA context, where there is a GPU) ends without an error, here or on a GPU machine: a solution
    worker opens the kept reference's inputs by CUDA IPC first thing, and that needs the context made."""
    worker = process.Worker(options.with_(device="auto"))
    try:
        answer = worker.call(unknown_command, 120)
    finally:
        worker.close()
    assert isinstance(answer, messages.Failed) and answer.cost.warm_up_error == ""


def test_the_cuda_toolkit_the_options_name_is_the_one_the_build_uses(options, tmp_path, monkeypatch):
    """Options.cuda_home (dice.cudaHome) reaches the worker, whose build looks for nvcc there, whatever the
    caller's own environment says; a spare started for another toolkit is not handed out for it."""
    monkeypatch.setenv("CUDA_HOME", "/somewhere/else")
    toolkit = options.with_(cuda_home=str(tmp_path))
    worker = process.Worker(toolkit, warm=False)
    try:
        probe = worker.file("solution.py", "import torch.utils.cpp_extension as c\n"
                                           "raise RuntimeError(f'uses {c.CUDA_HOME}')\n")
        answer = worker.call(messages.Build(path=probe, options=toolkit), 120)
    finally:
        worker.close()
    assert isinstance(answer, messages.Failed) and answer.error == f"RuntimeError: uses {tmp_path}"
    assert process.spare_key(toolkit, {}) != process.spare_key(options, {})
    assert os.environ["CUDA_HOME"] == "/somewhere/else"  # the caller's own environment is left alone
