"""One check at a time on a GPU, across processes (`harness.gpu_lock`): a second check waits for the card, says who
holds it, makes its reference's inputs only once it has its turn, and can be cancelled while it waits. The turn's
holder here is another real process; the check is a CPU check that takes a turn as a GPU check does (a GPU cannot
run on this machine, and which card a check uses is all that differs)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from dice_lsp.harness import gpu_lock, verdict
from dice_lsp.harness.errors import HarnessError

HOLD = """
import sys
from dice_lsp.harness.gpu_lock import GpuTurn
turn = GpuTurn(sys.argv[1], sys.argv[2])
assert turn.try_take()
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def holder(tmp_path, monkeypatch):
    """Another process holding card 0's turn, in this test's own lock folder, until the test ends it (`stop`)."""
    monkeypatch.setenv("DICE_LSP_CACHE", str(tmp_path / "cache"))
    process = subprocess.Popen([sys.executable, "-c", HOLD, gpu_lock.folder(), "0"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "held"

    def stop() -> None:
        process.stdin.close()
        process.wait()
    process.stop = stop  # type: ignore[attr-defined]
    yield process
    if process.poll() is None:
        stop()


def test_a_card_is_named_as_cuda_visible_devices_names_it():
    assert gpu_lock.card("cuda:1", {"CUDA_VISIBLE_DEVICES": "3,5"}) == "5"
    assert gpu_lock.card("auto", {"CUDA_VISIBLE_DEVICES": "GPU-8f1c/x"}) == "GPU-8f1c_x"  # a UUID, safe as a name
    assert gpu_lock.card("cuda", {"CUDA_VISIBLE_DEVICES": ""}) == "0"


def test_a_turn_waits_for_its_holder_and_says_who_it_is(holder):
    turn = gpu_lock.GpuTurn(gpu_lock.folder(), "0")
    told: list[str] = []

    def waiting(who: str) -> None:  # the holder ends once the turn is seen taken, whenever that is
        told.append(who)
        threading.Thread(target=holder.stop).start()
    turn.take(threading.Event(), 60, waiting)
    assert turn.held and told and told[0].startswith(f"process {holder.pid}, for ")
    turn.release()
    assert gpu_lock.GpuTurn(gpu_lock.folder(), "0").try_take()  # given back


def test_a_wait_ends_on_cancel_or_at_its_limit_with_the_holder_named(holder):
    turn = gpu_lock.GpuTurn(gpu_lock.folder(), "0")
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    with pytest.raises(HarnessError) as cancelled:
        turn.take(cancel, 60, lambda who: None)
    assert cancelled.value.kind == "cancelled" and not turn.held
    with pytest.raises(HarnessError) as busy:
        turn.take(threading.Event(), 0.3, lambda who: None)
    assert busy.value.kind == "busy" and f"process {holder.pid}" in str(busy.value)
    assert gpu_lock.GpuTurn(gpu_lock.folder(), "1").try_take()  # another card is free


def test_a_check_waits_for_the_cards_turn_then_runs_and_says_it_waited(files, options, holder, monkeypatch):
    monkeypatch.setattr(verdict, "uses_gpu", lambda _options: True)  # a GPU check's turn, on this CPU machine
    stages: list[str] = []
    done: list = []
    check = threading.Thread(target=lambda: done.append(verdict.Check(
        files.text("add_reference.py"), files.solution("return self.ext.add_values(a, b)"),
        options.with_(baseline="none", timing_trials=0), threading.Event(), on_stage=stages.append).run()))
    check.start()
    while "gpu" not in stages and check.is_alive():
        time.sleep(0.05)
    assert "gpu" in stages and "reference" not in stages  # its reference makes nothing before its turn
    holder.stop()
    check.join()
    [report] = done
    assert report.status == "correct", report.summary()
    [waited] = [s for s in report.stages if s.name == "gpu"]
    assert f"process {holder.pid}" in waited.detail
