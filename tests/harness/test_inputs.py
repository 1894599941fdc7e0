"""Trial inputs are made by each worker from the trial's seed (issue 25): no input data goes between processes, so a
problem with inputs of many gigabytes needs no file, and a reference too large to keep makes its trials again.

C++-only candidates, run for real on the CPU; the GPU path (inputs made on the device) is in test_gpu.py.
"""

from __future__ import annotations

import pytest
import torch

from dice_lsp import harness
from dice_lsp.harness import handover, stages, verify

NUMPY_REFERENCE = '''
import numpy as np
import random
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return a + b


def get_inputs():
    # numpy's and Python's generators, not torch's: every worker must still make the same values
    a = torch.from_numpy(np.random.rand(64, 32).astype("float32"))
    b = torch.full((64, 32), random.random())
    return [a, b]


def get_init_inputs():
    return []
'''


class _Module:
    def __init__(self, make):
        self.get_inputs = make


def test_the_same_seed_makes_the_same_inputs_and_another_seed_others():
    module = _Module(lambda: [torch.randn(4, 3), 7])
    first, where = verify.make_inputs(module, 3, torch.device("cpu"))
    again, _ = verify.make_inputs(module, 3, torch.device("cpu"))
    other, _ = verify.make_inputs(module, 4, torch.device("cpu"))
    assert where == "host" and first[1] == 7
    assert torch.equal(first[0], again[0]) and not torch.equal(first[0], other[0])


def test_a_reference_drawing_from_numpy_and_random_still_agrees_across_workers(files, options):
    report = harness.check(NUMPY_REFERENCE, files.solution("return self.ext.add_values(a, b)"), options)
    assert report.status == "correct", report.summary() + report.log
    verify_stage = next(s for s in report.stages if s.name == "verify")
    assert "inputs made by each worker (on the host)" in verify_stage.detail


@pytest.mark.parametrize("forward, status", [
    ("return self.ext.add_values(a, b)", "correct"),
    ("return self.ext.add_values(a, a)", "mismatch"),
])
def test_a_reference_that_keeps_nothing_makes_every_trial_again(files, options, forward, status):
    """With no room to keep them, the reference worker makes each trial's inputs and expected outputs again at
    compare time (one trial at a time): the verdict is the same as with everything kept."""
    report = harness.check(files.text("add_reference.py"), files.solution(forward), options,
                           extra_env={stages.KEEP_VARIABLE: "0"})
    assert report.status == status, report.summary() + report.log
    if status == "correct":
        assert len(report.trials) == options.correctness_trials + 1 and all(t.passed for t in report.trials)


def test_a_candidate_that_changes_how_its_own_inputs_are_made_only_fails_itself(files, options):
    """Its worker makes its inputs after importing it, so it can patch torch.randn there: it then gets zeros, but the
    expected outputs were made from the reference worker's own inputs, which it cannot reach."""
    prelude = "import torch as _t\n_t.randn = lambda *size, **kw: _t.zeros(*size, **kw)\n"
    report = harness.check(files.text("add_reference.py"),
                           files.solution("return a * 0", prelude), options)
    assert report.status == "mismatch", report.summary()


SEEKER = '''import os, re, sys


def _reference_seen():
    """Anything of the reference's op this process can read: a file beside this one, or a loaded module."""
    folder = os.path.dirname(os.path.abspath(__file__))
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if path == os.path.abspath(__file__):
            continue
        try:
            text = open(path).read()
        except Exception:
            continue
        if re.search("class Model[(:]", text) or "a + b" in text:
            return path
    for module in list(sys.modules.values()):
        if module is not None and module.__name__ != __name__ and isinstance(vars(module).get("Model"), type):
            return module.__name__
    return ""

'''


def test_the_solution_worker_gets_how_inputs_are_made_never_the_reference_op(files, options):
    """Its worker needs get_inputs to make the trials' inputs: it gets the reference's file without class Model
    (`handover.input_recipe`), so a candidate that looks for the op to copy, in its folder or in its modules, finds
    nothing, and here computes the honest answer."""
    solution = files.solution("seen = _reference_seen()\n"
                              "        return self.ext.add_values(a, a) if seen else self.ext.add_values(a, b)",
                              SEEKER)
    report = harness.check(files.text("add_reference.py"), solution, options)
    assert report.status == "correct", report.summary() + report.log


def test_the_input_recipe_keeps_everything_but_the_model():
    text = (
        "import torch\nN = 4\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n\n\n"
        "class Helper:\n    pass\n\n\ndef get_inputs():\n    return [torch.rand(N)]\n\n\ndef get_init_inputs():\n"
        "    return []\n")
    recipe = handover.input_recipe(text)
    assert "class Model" not in recipe and "x * 2" not in recipe
    assert all(part in recipe for part in ("N = 4", "class Helper", "def get_inputs", "def get_init_inputs"))
    assert handover.input_recipe("def broken(:") == "def broken(:"


@pytest.mark.parametrize("at_once", [1, 2])
@pytest.mark.parametrize("forward, status, code", [
    ("return self.ext.add_values(a, b)", "correct", None),
    ("return self.ext.add_values(a, a)", "mismatch", None),
    ("return self.ext.add_cached(a, b)", "mismatch", "output-cached"),  # found by the changed inputs, called last
    ("a.zero_()\n        return a", "mismatch", None),
])
def test_trials_run_a_few_at_a_time_give_the_verdict_of_all_at_once(files, options, at_once, forward, status, code):
    """When a problem's trials do not fit the GPU together, the solution's worker runs them a call at a time (here
    forced by `trials_at_once`) and the reference compares each call's outputs before the next: every trial is
    still compared once, and the changed inputs still catch a cache keyed by pointers."""
    report = harness.check(files.text("add_reference.py"), files.solution(forward), options.with_(
        trials_at_once=at_once, baseline="none", timing_trials=0))
    assert report.status == status, report.summary() + report.log
    assert len(report.trials) == options.correctness_trials + 1
    assert [t.changed_inputs for t in report.trials] == [False] * options.correctness_trials + [True]
    if code:
        assert code in [f.code for f in report.findings], report.findings
    if status == "correct":
        verify_stage = next(s for s in report.stages if s.name == "verify")
        assert "calls (the trials do not fit the GPU together)" in verify_stage.detail, verify_stage.detail


def test_the_trials_are_split_by_what_the_reference_measured_against_the_gpu():
    from dice_lsp.harness.messages import ReferenceMade
    from dice_lsp.harness.trials import trial_groups

    def made(trial_gb: float, gpu_gb: float) -> ReferenceMade:
        return ReferenceMade(device="GPU", tf32=False, cudnn_tf32=True, matmul_precision="highest", dtypes=(),
                             trial_bytes=int(trial_gb * 1e9), device_bytes=int(gpu_gb * 1e9))

    every = [(None, True)]
    assert trial_groups(made(8.6, 143), harness.Options()) == every  # one 8.6 GB input, 2 MB out: 77 GB fits
    one_by_one = [((i,), False) for i in range(5)] + [((), True)]
    assert trial_groups(made(18.1, 143), harness.Options()) == one_by_one  # 9 GB in and out: 163 GB does not
    assert trial_groups(made(18.1, 0), harness.Options()) == every  # the CPU: no GPU to fit
    assert trial_groups(made(0.01, 143), harness.Options(trials_at_once=3)) == [((0, 1, 2), False), ((3, 4), False),
                                                                               ((), True)]


def test_files_taken_from_a_candidates_folder_are_regular_and_bounded(tmp_path):
    """What the caller copies out of a solution's sandbox (its outputs, CUDA's IPC files): a link it planted to a
    file of the user's is not opened at all (as if absent), a pipe that would block the caller or a file past the limit
    is refused."""
    import os

    secret = tmp_path / "secret"
    secret.write_text("the user's")
    (tmp_path / "link").symlink_to(secret)
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "big").write_bytes(b"x" * 100)
    (tmp_path / "fine").write_bytes(b"x" * 10)
    copy = handover._copy_regular
    assert copy(tmp_path / "link", tmp_path / "out1", 50) is None and not (tmp_path / "out1").exists()  # not opened
    assert copy(tmp_path / "pipe", tmp_path / "out2", 50) is False
    assert copy(tmp_path / "big", tmp_path / "out3", 50) is False
    assert copy(tmp_path / "missing", tmp_path / "out4", 50) is None
    assert copy(tmp_path / "fine", tmp_path / "out5", 50) is True and (tmp_path / "out5").read_bytes() == b"x" * 10
