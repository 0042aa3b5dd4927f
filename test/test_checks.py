"""Tests of torchrl_ext._checks: one vocabulary of argument errors for every component."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from torchrl_ext._checks import (
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_key,
    check_optional_int,
    check_tensor,
)


class TestCheckInt:
    """Integers of any kind pass as Python ints; other types are TypeErrors, bounds ValueErrors."""

    @pytest.mark.parametrize("value", [3, np.int64(3), np.int8(3), torch.tensor(3)])
    def test_integers_pass_as_int(self, value):
        out = check_int("n", value, minimum=1, maximum=3)
        assert out == 3 and type(out) is int

    @pytest.mark.parametrize(
        "value", [3.0, True, np.True_, "3", None, torch.tensor([3]), torch.tensor(3.0)]
    )
    def test_non_integers_are_type_errors(self, value):
        with pytest.raises(TypeError, match="n must be an int, got n="):
            check_int("n", value)

    def test_bounds_are_value_errors_naming_the_value(self):
        with pytest.raises(ValueError, match="n must be >= 1, got n=0"):
            check_int("n", 0, minimum=1)
        with pytest.raises(ValueError, match=r"n must be <= 5, got n=np\.int32\(6\)"):
            check_int("n", np.int32(6), maximum=5)

    def test_optional(self):
        assert check_optional_int("n", None) is None
        assert check_optional_int("n", 2, minimum=1) == 2


class TestCheckFloat:
    """Finite real numbers within bounds pass as Python floats."""

    @pytest.mark.parametrize("value", [0.5, 1, np.float32(0.5), torch.tensor(0.5)])
    def test_reals_pass(self, value):
        assert check_float("x", value, 0.0, 1.0) == float(value)

    @pytest.mark.parametrize("value", [True, "0.5", None, torch.tensor([0.5, 0.5]), 1j])
    def test_non_reals_are_type_errors(self, value):
        with pytest.raises(TypeError, match="x must be a real number"):
            check_float("x", value)

    @pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
    def test_non_finite_are_value_errors(self, value):
        with pytest.raises(ValueError, match="x must be a finite number"):
            check_float("x", value)

    def test_bounds(self):
        with pytest.raises(ValueError, match=r"x must be > 0\.0, got x=0\.0"):
            check_float("x", 0.0, 0.0, open_minimum=True)
        with pytest.raises(ValueError, match=r"x must be <= 1\.0"):
            check_float("x", 1.5, maximum=1.0)


def test_check_bool():
    assert check_bool("b", np.False_) is False
    with pytest.raises(TypeError, match="b must be a bool, got b=1"):
        check_bool("b", 1)


def test_check_choice():
    assert check_choice("mode", "a", ("a", "b")) == "a"
    with pytest.raises(ValueError, match=r"mode must be one of \['a', 'b'\], got mode='c'"):
        check_choice("mode", "c", ("a", "b"))
    with pytest.raises(TypeError, match="mode must be one of"):
        check_choice("mode", 1, ("a", "b"))


def test_check_key():
    assert check_key("k", "done") == "done"
    assert check_key("k", ["next", "done"]) == ("next", "done")
    assert check_key("k", None, optional=True) is None
    with pytest.raises(TypeError, match="k must be a str or a tuple of str, got k=3"):
        check_key("k", 3)
    for bad in ("", (), ("next", ""), ("next", 1)):
        with pytest.raises(ValueError, match="k must be a non-empty key"):
            check_key("k", bad)


def test_check_tensor():
    cpu = torch.device("cpu")
    x = torch.zeros(3, 1, dtype=torch.bool)
    assert check_tensor("m", x, torch.bool, [(3, 1), (3,)], cpu) is x
    cases = [
        ([0, 1], TypeError, r"m must be a torch.Tensor, got m=\[0, 1\]\."),
        (x.long(), TypeError, r"m must have dtype torch.bool, got m.dtype=torch.int64\."),
        (x.view(3), ValueError, r"m must have shape \(3, 1\), got m.shape=\(3,\)\."),
        (x.to("meta"), ValueError, r"m must be on cpu, got m.device=meta\."),
    ]
    for value, err, match in cases:
        with pytest.raises(err, match=match):
            check_tensor("m", value, torch.bool, [(3, 1)], cpu)
