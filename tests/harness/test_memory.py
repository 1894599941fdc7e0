"""The memory plan (harness/memory.py), the ledger checks share a device's memory through (harness/ledger.py), and
the digests the lean plan checks inputs with (verify.digest): pure functions, and real processes for the ledger.

The plan's numbers for the problems that failed on the H100 of 2026-12-07 (KernelBench level 1 at its own sizes):
38_L1Norm_ (32768 x 65535 float32: 8.59 GB in, 8.59 GB out) and 19_ReLU (4096 x 393216: 6.44 GB in and out).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from dice_lsp.harness import ledger, memory, verify
from dice_lsp.harness.memory import Device, Sizes

H100, H200 = 85_000_000_000, 143_700_000_000  # as torch says them: "85.0 GB", "143.7 GB"
GB = 1e9


def elementwise(gb: float) -> Sizes:
    """A float32 elementwise or row-normalising op: outputs as large as inputs, forward's peak its outputs (ReLU) or
    one temporary of that size (L1 norm's |x| then x / sum)."""
    size = int(gb * GB)
    return Sizes(inputs=size, outputs=size, forward=size, input_elements=size // 4, output_elements=size // 4)


def on(card: int) -> memory.Room:
    return memory.room(Device(key="cuda:GPU-test", total=card))


@pytest.mark.parametrize("gb", [8.59, 6.44])
def test_the_h100s_failures_fit_lean_and_not_exact(gb):
    """Exact (the copies the worker held on 2026-12-07) cannot fit an 80 GB card; lean fits it with room for the
    card's other users, and with much less than half of an H200."""
    exact = memory.plan(elementwise(gb), on(H100), 5, "exact")
    lean = memory.plan(elementwise(gb), on(H100), 5)
    assert not exact.fits and exact.total > H100
    assert lean.mode == "lean" and lean.at_once == 1 and lean.fits
    assert lean.total < 0.6 * exact.total
    assert memory.plan(elementwise(gb), on(H200), 5).total < H200 / 2
    # Whatever the card, one trial past LEAN_FROM runs lean: two such checks may then share a card
    assert memory.plan(elementwise(gb), on(H200), 5).mode == "lean"


def test_lean_holds_about_five_trials_worth_at_its_peak():
    """8.59 GB in and out: the check's peak (both workers, their CUDA contexts) is 5 to 6 inputs' worth, where the
    exact plan's is past 14."""
    sizes = elementwise(8.59)
    lean, exact = memory.plan(sizes, on(H200), 5, "lean"), memory.plan(sizes, on(H200), 5, "exact")
    assert 5 * sizes.inputs < lean.total < 6 * sizes.inputs, lean.needs
    assert exact.total > 14 * sizes.inputs, exact.needs
    assert {n.stage for n in lean.needs} == {"reference", "run", "compare", "time", "inspect"}


def test_a_problem_too_big_for_the_card_is_refused_in_numbers():
    plan = memory.plan(elementwise(20.0), on(H100), 5)
    said = plan.refusal()
    assert not plan.fits and said.startswith("this problem does not fit this GPU: one trial's inputs take 20.00 GB "
                                             "and its outputs 20.00 GB")
    assert "checked lean" in said and f"{plan.total / GB:.1f} GB at once" in said and "85.0 GB" in said
    assert f"lets a check use {0.95 * H100 / GB:.1f} GB" in said


def test_small_problems_stay_exact_and_a_tight_one_goes_one_trial_a_call_then_lean():
    small = Sizes(inputs=2 << 20, outputs=1 << 20, forward=1 << 20, input_elements=1 << 19, output_elements=1 << 18)
    plan = memory.plan(small, on(H100), 5)
    assert (plan.mode, plan.at_once) == ("exact", 0)
    assert memory.plan(small, on(H100), 5, "lean").mode == "lean"
    # Cards each just large enough for one plan (GPU_SHARE of them): all at once, then one trial a call (with 40
    # trials, all their outputs at once are the exact plan's peak), then lean
    medium = elementwise(0.4)
    together = memory.plan(medium, on(H100), 40, "exact", at_once=0)
    apart = memory.plan(medium, on(H100), 40, "exact", at_once=1)
    lean = memory.plan(medium, on(H100), 40, "lean")
    assert together.total > apart.total > lean.total and together.peak.stage in ("run", "compare")
    for needed, mode, at_once in ((together, "exact", 0), (apart, "exact", 1), (lean, "lean", 1)):
        card = memory.room(Device("cuda:x", math.ceil(needed.total / memory.GPU_SHARE) + 1))
        found = memory.plan(medium, card, 40)
        assert (found.mode, found.at_once) == (mode, at_once), (needed.total, found.describe())


def test_trials_at_once_is_the_exact_plans_calls():
    small = Sizes(inputs=1 << 20, outputs=1 << 20, forward=1 << 20)
    assert memory.plan(small, on(H100), 5, at_once=3).at_once == 3


def test_on_the_cpu_each_workers_limit_and_the_outputs_file_count():
    """On the CPU a worker's address space is limited (memory_limit_gb), and its start takes part of it; the
    solution's outputs travel in a file of its scratch folder."""
    device = Device(key="host", total=24 << 30, start_vm=3 << 30, start_rss=500 << 20)
    sizes = elementwise(0.4)
    roomy = memory.room(device, limit=12 << 30, handover=1 << 30)
    assert memory.plan(sizes, roomy, 5).fits
    tight = memory.room(device, limit=(3 << 30) + (1 << 29) + (1 << 30), handover=1 << 30)  # 1 GiB for trials
    plan = memory.plan(sizes, tight, 5)
    said = plan.refusal()
    assert plan.mode == "lean" and not plan.fits
    assert "does not fit this machine" in said and "may hold 1.07 GB" in said and "memory_limit_gb" in said
    small_file = memory.room(device, limit=12 << 30, handover=100 << 20)
    said = memory.plan(sizes, small_file, 5).refusal()
    assert "0.40 GB a call" in said and "scratch_limit_mb" in said


def test_the_reference_stage_is_planned_before_the_check_runs():
    """What the ledger is asked for before the reference runs: its stage alone is the reference's inputs and
    forward, and the solution's worker's model."""
    plan = memory.plan(elementwise(8.59), on(H100), 5)
    stage = plan.needs[0]
    assert stage.stage == "reference" and stage.reference == pytest.approx(2 * 8.59 * GB, rel=1e-6)


# -- the ledger: real processes --------------------------------------------------------------------------------------

HOLDER = textwrap.dedent('''
    import sys, time
    from pathlib import Path
    from dice_lsp.harness import ledger
    path, folder, amount = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    book = ledger.Ledger(path)
    waited, most = book.reserve("fake-gpu", "holder", amount, 100, 60,
                                on_wait=lambda held: (folder / "holder-waiting").write_text(str(held)))
    (folder / "held").write_text("yes")
    while not (folder / "release").exists():
        time.sleep(0.01)
    book.release("holder")
    (folder / "released").write_text("yes")
''')

WAITER = textwrap.dedent('''
    import sys
    from pathlib import Path
    from dice_lsp.harness import ledger
    path, folder, amount = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    book = ledger.Ledger(path)
    waited, most = book.reserve("fake-gpu", "waiter", amount, 100, 60,
                                on_wait=lambda held: (folder / "waiting").write_text(str(held)))
    (folder / "granted").write_text(f"{most} {(folder / 'released').exists()}")
''')


def _until(path: Path, process: subprocess.Popen, limit: float = 60.0) -> str:
    """The text of `path` once it exists (a hang guard, not a timing assertion)."""
    deadline = time.monotonic() + limit
    while not path.exists():
        assert process.poll() is None or path.exists(), process.communicate()
        assert time.monotonic() < deadline, f"{path.name} never came"
        time.sleep(0.01)
    return path.read_text()


def test_a_second_check_waits_for_the_first_and_goes_on_when_it_releases(tmp_path):
    """Two processes on one (fake) device of 100 bytes: the first holds 70, the second wants 50 and waits, told what
    the other holds; once the first releases, the second gets its bytes."""
    book = tmp_path / "ledger.json"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(book), str(tmp_path), "70"])
    _until(tmp_path / "held", holder)
    waiter = subprocess.Popen([sys.executable, "-c", WAITER, str(book), str(tmp_path), "50"])
    assert _until(tmp_path / "waiting", waiter) == "70"
    assert not (tmp_path / "granted").exists()
    assert [(e.check, e.bytes) for e in ledger.Ledger(book).entries()] == [("holder", 70)]
    (tmp_path / "release").write_text("now")
    most, released_first = _until(tmp_path / "granted", waiter).split()
    assert (most, released_first) == ("70", "True")
    assert waiter.wait(60) == 0 and holder.wait(60) == 0
    assert ledger.Ledger(book).entries() == []  # the waiter ended: its entry is dead and dropped


def test_an_entry_of_a_process_that_ended_holds_nothing(tmp_path):
    """A check killed before it released (its process gone) leaves an entry; the next reader drops it, and a PID
    used again by another process is told apart by its start time."""
    book = ledger.Ledger(tmp_path / "ledger.json")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = ledger.Entry(gone.pid, "12345", "fake-gpu", "killed", 90)
    reused = ledger.Entry(os.getpid(), "1", "fake-gpu", "pid-reused", 90)  # this PID, another start time
    (tmp_path / "ledger.json").write_text('{"entries": [%s, %s]}' % tuple(
        str(e.__dict__).replace("'", '"') for e in (stale, reused)))
    assert book.held("fake-gpu") == 0
    assert book.try_reserve("fake-gpu", "new", 95, 100) is None
    assert [(e.check, e.bytes) for e in book.entries()] == [("new", 95)]


def test_a_check_that_cannot_wait_longer_is_told_the_numbers(tmp_path):
    book = ledger.Ledger(tmp_path / "ledger.json")
    assert book.try_reserve("fake-gpu", "first", 80, 100) is None
    with pytest.raises(ledger.Crowded) as crowded:
        book.reserve("fake-gpu", "second", 30, 100, wait_s=0)
    assert (crowded.value.amount, crowded.value.held, crowded.value.capacity) == (30, 80, 100)
    assert book.try_reserve("other-gpu", "second", 30, 100) is None  # another device's memory is its own
    book.release("first")
    assert book.try_reserve("fake-gpu", "second", 30, 100) is None  # grows its own entry, no double count
    assert book.held("fake-gpu") == 30 and book.held("fake-gpu", besides="second") == 0


def test_a_corrupt_ledger_holds_nothing(tmp_path):
    (tmp_path / "ledger.json").write_text("{not json")
    book = ledger.Ledger(tmp_path / "ledger.json")
    assert book.try_reserve("fake-gpu", "c", 10, 100) is None and book.held("fake-gpu") == 10


# -- digests ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32,
                                   torch.int64, torch.uint8, torch.bool, torch.complex64])
def test_a_digest_sees_one_element_changed_and_nothing_else(dtype):
    key = verify.digest_key()
    values = (torch.randn(301, 17) * 50).to(dtype)
    same = verify.digest(values, key)
    assert verify.digest(values.clone(), key) == same
    changed = values.clone()
    changed[300, 16] = ~changed[300, 16] if dtype == torch.bool else changed[300, 16] + 1
    assert verify.digest(changed, key) != same
    assert verify.digest(values, verify.digest_key()) != same  # another key, other sums


def test_a_digest_answers_sames_question_for_zeros_and_nans_and_any_layout():
    key = verify.digest_key()
    values = torch.randn(64, 40)
    values[3, 4] = math.nan
    positive, negative = values.clone(), values.clone()
    positive[0, 0], negative[0, 0] = 0.0, -0.0
    assert verify.same(positive, negative) and verify.digest(positive, key) == verify.digest(negative, key)
    other_nan = positive.clone()
    other_nan[3, 4] = -math.nan
    assert verify.digest(other_nan, key) == verify.digest(positive, key)
    moved = positive.clone()
    moved[3, 4], moved[3, 5] = moved[3, 5], math.nan
    assert not verify.same(positive, moved) and verify.digest(moved, key) != verify.digest(positive, key)
    transposed = positive.t()
    assert verify.digest(transposed, key) == verify.digest(transposed.contiguous(), key)


def test_a_digest_of_many_chunks_changes_with_any_one(monkeypatch):
    """Chunks (here of 1000 elements) are weighted apart: the same change in two chunks moves the digest
    differently, and swapping two chunks' contents is seen."""
    monkeypatch.setattr(verify, "DIGEST_CHUNK", 1000)
    key = verify.digest_key()
    values = torch.randn(5000)
    same = verify.digest(values, key)
    swapped = torch.cat([values[1000:2000], values[:1000], values[2000:]])
    assert verify.digest(swapped, key) != same
    first, second = values.clone(), values.clone()
    first[10] += 1
    second[1010] += 1
    assert len({verify.digest(first, key), verify.digest(second, key), same}) == 3


def test_outputs_handed_over_without_a_copy_unless_they_must_be():
    out = torch.randn(8, 4)
    assert verify.handed([out])[0].data_ptr() == out.data_ptr()  # the same memory: no copy
    view = torch.randn(100)[10:20]
    assert verify.handed([view])[0].untyped_storage().nbytes() == 40  # a view into more: its own storage
    transposed = torch.randn(3, 5).t()
    assert verify.handed([transposed])[0].is_contiguous()


def test_the_norm_is_taken_a_chunk_at_a_time():
    values = torch.randn(10_001)
    assert verify.norm(values, chunk=97) == pytest.approx(float(torch.linalg.vector_norm(values.double())), rel=1e-12)
