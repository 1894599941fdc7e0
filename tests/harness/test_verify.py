"""The comparison names the worst element by its index in the output's shape."""

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
