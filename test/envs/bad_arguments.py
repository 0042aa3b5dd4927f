"""Hypothesis strategies of bad arguments for the env fuzz tests, and a bitwise state check.

Each strategy draws values that the argument it is named for must refuse; the fuzz tests assert
that a call with one of them raises ``TypeError`` or ``ValueError`` and leaves the env's
``state_dict()`` bitwise unchanged.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import strategies as st

DTYPES = [torch.bool, torch.uint8, torch.int32, torch.int64, torch.float16, torch.float32]
DTYPES += [torch.float64, torch.complex64]
FILLS = [0, 1, -1, 2, 0.5, math.nan, math.inf, -math.inf, 2**40]


def _tensor(shape: list[int], dtype: torch.dtype, fill: float) -> torch.Tensor:
    values = torch.full(shape, fill, dtype=torch.float64)
    if not dtype.is_floating_point and not dtype.is_complex:
        values = torch.nan_to_num(values).clamp(-(2**31), 2**31 - 1)
    return values.to(dtype)


def tensors(leading: int | None = None) -> st.SearchStrategy[torch.Tensor]:
    """CPU tensors of any dtype, 0 to 3 dims (the first ``leading`` if given), one fill value."""
    rest = st.lists(st.integers(0, 3), max_size=2)
    shape = (
        rest.map(lambda r: [leading, *r])
        if leading is not None
        else st.lists(st.integers(0, 5), max_size=3)
    )
    return st.builds(_tensor, shape, st.sampled_from(DTYPES), st.sampled_from(FILLS))


def not_tensors() -> st.SearchStrategy:
    """Python values that are not tensors."""
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-3, 3),
        st.floats(allow_nan=True),
        st.text(max_size=3),
        st.lists(st.integers(0, 1), max_size=3),
        st.just(np.zeros(2)),
    )


def bad_ints(low: int, high: int | None = None) -> st.SearchStrategy:
    """What an int argument in ``[low, high]`` must refuse: out of range, floats, bools, others."""
    out = [st.integers(max_value=low - 1), st.sampled_from([1.0, 2.5, math.nan]), st.booleans()]
    out += [st.none(), st.text(max_size=2), st.just(torch.tensor([1, 2]))]
    if high is not None:
        out.append(st.integers(min_value=high + 1))
    return st.one_of(*out)


def not_bools() -> st.SearchStrategy:
    return st.one_of(st.integers(0, 1), st.none(), st.text(max_size=2), st.floats())


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and bytes (NaN payloads included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def assert_state_unchanged(before: dict, env) -> None:
    """``env.state_dict()`` equals the snapshot ``before`` bitwise."""
    after = env.state_dict()
    assert before.keys() == after.keys()
    for key, value in before.items():
        assert bitwise_equal(value, after[key]), key


def warp_env_arguments() -> dict[str, st.SearchStrategy]:
    """Bad values of every :class:`~torchrl_ext.envs.WarpEnv` constructor argument."""
    return {
        "num_envs": bad_ints(1),
        "device": st.one_of(st.sampled_from(["tpu", "", "cpu:x", "meta"]), st.floats(), st.none()),
        "seed": st.one_of(
            st.integers(max_value=-1),
            st.integers(min_value=2**64),
            st.floats(),
            st.booleans(),
            st.text(max_size=2),
        ),
        "max_steps": bad_ints(1, 2**31 - 1).filter(lambda v: v is not None),
        "dtype": st.one_of(
            st.sampled_from([torch.int32, torch.float16, torch.bool]), tensors(), not_tensors()
        ),
        "capture": not_bools(),
    }
