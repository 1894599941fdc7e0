"""The comparison names the worst element by its index in the output's shape."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dice_lsp.harness import Options, stages, verify
from dice_lsp.harness.messages import Compare
from dice_lsp.harness.side import Side


def test_the_worst_element_is_named_by_its_index():
    expected = torch.zeros(2, 3, 4)
    got = expected.clone()
    got[1, 2, 3] = 5.0
    got[0, 1, 1] = 0.5
    result = verify.compare([got], [expected], 1e-2, 1e-2)
    assert not result["passed"] and result["where"] == "output[1, 2, 3]" and result["max_abs_error"] == 5.0


def test_a_scalar_output_is_named_without_an_index():
    result = verify.compare([torch.tensor(2.0), torch.tensor(1.0)], [torch.tensor(2.0), torch.tensor(0.0)], 1e-2, 1e-2)
    assert not result["passed"] and result["where"] == "output[1]"


def test_unravel_matches_row_major_order():
    shape = (2, 1, 3)
    flat = torch.arange(6).reshape(shape)
    for index in range(6):
        assert flat[verify.unravel(index, shape)] == index


def test_non_finite_values_follow_allclose_and_the_expected_outputs_stay_untouched():
    expected = torch.randn(40, 30, dtype=torch.float64)
    kept = expected.clone()
    within = verify.compare([expected + 1e-4], [expected], 1e-2, 1e-2)
    assert within["passed"] and within["max_abs_error"] < 2e-4 and within["relative_l2"] < 1e-3
    assert torch.equal(expected, kept), "the comparison changed the reference's tensor"
    nan = expected.clone()
    nan[1, 1] = float("nan")
    assert not verify.compare([nan], [expected], 1e-2, 1e-2)["passed"]
    assert not verify.compare([nan], [nan.clone()], 1e-2, 1e-2)["passed"]  # allclose: NaN is never close
    inf = expected.clone()
    inf[2, 2] = float("inf")
    assert verify.compare([inf], [inf.clone()], 1e-2, 1e-2)["passed"]  # equal infinities are close
    off = verify.compare([inf], [expected], 1e-2, 1e-2)
    assert not off["passed"] and off["where"] == "output[2, 2]" and off["relative_l2"] == float("inf")


@pytest.mark.gpu
def test_the_comparison_on_a_gpu_equals_the_one_on_the_cpu():
    expected = torch.randn(300, 200)
    got = expected + 0.02 * torch.randn(300, 200)
    cpu = verify.compare([got], [expected], 1e-2, 1e-2)
    gpu = verify.compare([got], [expected], 1e-2, 1e-2, torch.device("cuda"))
    assert cpu["passed"] == gpu["passed"] and cpu["where"] == gpu["where"]
    assert abs(cpu["max_abs_error"] - gpu["max_abs_error"]) < 1e-12


SHARE = """
import json, sys, torch
from dice_lsp.harness import verify
outputs = [torch.randn(33, 17, device="cuda"), torch.arange(10, device="cuda", dtype=torch.int64)[2:].clone(),
           torch.empty(0, 4, device="cuda", dtype=torch.float16), torch.tensor(3.5, device="cuda")]
torch.cuda.synchronize()
print(json.dumps(verify.share(outputs)), flush=True)
sys.stdin.readline()  # alive until the other process has compared
torch.save([o.cpu() for o in outputs], sys.argv[1])
"""


@pytest.mark.gpu
def test_outputs_shared_by_cuda_ipc_arrive_whole_in_another_process(tmp_path):
    root = os.pathsep.join([str(Path(verify.__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")])
    child = subprocess.Popen([sys.executable, "-c", SHARE, str(tmp_path / "sent.pt")], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": root}, cwd=tmp_path)
    received = verify.receive(json.loads(child.stdout.readline()))
    copies = [t.cpu() for t in received]
    child.stdin.write("\n")
    child.stdin.flush()
    assert child.wait(60) == 0
    sent = torch.load(tmp_path / "sent.pt")
    assert [(t.dtype, t.shape) for t in copies] == [(t.dtype, t.shape) for t in sent]
    assert all(torch.equal(a, b) for a, b in zip(copies, sent))


def test_unreadable_shared_outputs_make_the_reference_ask_for_a_file(tmp_path):
    """What the pipeline falls back on: compare answers `unshared` instead of failing, and reads outputs.pt after."""
    side = Side()
    side.options, side.device = Options(atol=1e-2, rtol=1e-2, seed=42), torch.device("cpu")
    side.trials, side.expected, side.expected_changed = [(43, [])], [[torch.ones(3)]], [torch.ones(3)]
    side.model = lambda: torch.ones(3)  # run twice on the first trial's (no) inputs: it agrees with itself
    (tmp_path / "outputs.json").write_text('{"trials": [[{"dtype": "os.system", "shape": [3], "device": 0}]]}')
    answer = stages.compare(side, Compare(exchange=str(tmp_path)))
    assert not answer.trials and "os.system" in answer.unshared
    torch.save({"trials": [[torch.ones(3)]], "changed": [torch.ones(3)]}, tmp_path / "outputs.pt")
    answer = stages.compare(side, Compare(exchange=str(tmp_path)))
    assert [t.passed for t in answer.trials] == [True, True] and answer.unshared == ""


def test_a_calls_handover_leaves_no_file_of_an_earlier_call(tmp_path):
    """A check whose trials run a call each: an earlier call's file fallback (one trial) must not be read as a later
    call's outputs (only the changed inputs'), as on the H100 of 2026-12-07 ("1 trials' outputs handed over for
    trials []"): each handover clears what the one before left, whichever way it went."""
    side = Side()
    side.outputs = {"trials": [], "changed": [torch.ones(3)]}
    torch.save({"trials": [[torch.zeros(3)]], "changed": []}, tmp_path / "outputs.pt")
    (tmp_path / "outputs.json").write_text('{"trials": [[]], "changed": []}')
    assert stages._hand_over(side, tmp_path, sharing=False) == "file"
    assert not (tmp_path / "outputs.json").exists()
    handed = torch.load(tmp_path / "outputs.pt", weights_only=True)
    assert handed["trials"] == [] and torch.equal(handed["changed"][0], torch.ones(3))


@pytest.mark.parametrize("case", ["close", "one element off", "nan where none", "inf both", "wrong late"])
def test_a_comparison_in_chunks_says_what_one_pass_says(case):
    """Outputs of billions of elements are compared a chunk at a time (`verify.COMPARE_CHUNK`); the verdict, the
    worst element and where it is, and the errors must not depend on the chunk size."""
    torch.manual_seed(0)
    expected = torch.randn(6, 37)
    got = expected + 1e-7 * torch.randn(6, 37)
    if case == "one element off":
        got[2, 5] += 0.5
    elif case == "nan where none":
        got[4, 1] = float("nan")
    elif case == "inf both":
        got[0, 0] = expected[0, 0] = float("inf")
    elif case == "wrong late":
        got[5, 36] -= 3.0
    whole = verify._compare([got], [expected], 1e-5, 1e-5, None, chunk=10**9)
    for chunk in (1, 7, 64):
        parts = verify._compare([got], [expected], 1e-5, 1e-5, None, chunk=chunk)
        # (with an infinity in both, one pass's worst element and relative error are the NaN of inf - inf, which
        # hides every other element's: chunks other than that one still say theirs)
        keys = ("passed", "note", "max_abs_error") + (() if case == "inf both" else ("where", "max_rel_error"))
        assert {k: parts[k] for k in keys} == {k: whole[k] for k in keys}
        assert parts["relative_l2"] == pytest.approx(whole["relative_l2"], rel=1e-9, nan_ok=True)
    assert whole["passed"] == (case in ("close", "inf both")), whole


def test_running_out_of_gpu_memory_is_said_in_numbers(monkeypatch):
    """A trial that does not fit the GPU ends the stage with what one trial takes and what the GPU has, not torch's
    allocator dump. (The GPU's numbers are stand-ins: this machine has none.)"""
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (2e9, 80e9))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 70e9)
    side = Side()
    side.device, side.trial_bytes = torch.device("cuda", 0), 18_120_000_000
    with pytest.raises(MemoryError) as raised:
        with stages._plain_oom(side, "running the solution's trials"):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.44 GiB")
    said = str(raised.value)
    assert said.startswith("the GPU ran out of memory running the solution's trials: one trial's inputs and outputs "
                           "take 18.12 GB"), said
    assert "the GPU has 80.0 GB, 2.0 GB free, 70.0 GB held by this worker" in said and "Tried" not in said


def test_a_later_call_is_held_to_a_sample_of_the_verified_outputs_at_any_size():
    big = torch.randn(300, 400)
    kept = verify.sample([big, torch.arange(5.0)])
    assert len(kept[0][1]) == verify.SAMPLE_POINTS and len(kept[1][1]) == 5  # small outputs: every element
    assert verify.matches([big.clone(), torch.arange(5.0)], kept, 1e-5, 1e-5) == ""
    assert "differs by up to" in verify.matches([torch.zeros_like(big), torch.arange(5.0)], kept, 1e-5, 1e-5)
    assert "output[1] has shape (4,)" in verify.matches([big, torch.arange(4.0)], kept, 1e-5, 1e-5)
    assert verify.matches([big], kept, 1e-5, 1e-5) == "1 outputs, 2 when verified"
    nudged = big.clone()
    nudged.view(-1)[kept[0][1][0]] += 1.0  # one sampled element off
    assert "output[0] differs by up to 1" in verify.matches([nudged, torch.arange(5.0)], kept, 1e-5, 1e-5)


def test_a_cuda_that_fails_beside_a_gpus_nodes_gives_the_drivers_reason(tmp_path):
    """A worker whose sandbox shows the GPU's nodes but where the driver fails (error 304 on the H100 of 2026-12-07)
    says why, so the check reports it instead of "no GPU". Here no driver is installed: a node's name stands in."""
    cuda_failure = stages.cuda_failure
    if torch.version.cuda is None:
        pytest.skip("this torch has no CUDA")
    assert cuda_failure(str(tmp_path / "nvidia[0-9]*")) == ""  # no node: no GPU, nothing failed
    (tmp_path / "nvidia0").touch()
    if torch.cuda.is_available():
        assert cuda_failure(str(tmp_path / "nvidia[0-9]*")) == ""
    else:
        assert "driver" in cuda_failure(str(tmp_path / "nvidia[0-9]*")).lower()
