"""The comparison names the worst element by its index in the output's shape."""

import pytest
import torch

from harness import verify


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
