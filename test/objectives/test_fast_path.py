"""The common plain-GAE call (``torchrl_ext.objectives._fast_path``).

Contract: on an env-major ``[N, T]`` CPU rollout with ``[N, T, 1]`` contiguous float rewards and
values and bool flags, :func:`plain_gae` writes exactly what the general path writes (same
bits, same carry); on anything else it declines, writing nothing, and the general path runs.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from torchrl_ext.objectives import RecurrentGAE
from torchrl_ext.objectives._fast_path import plain_gae

OUTPUTS = ("advantage", "value_target", "is_init")


def rollout(n=5, t=11, seed=0, dtype=torch.float32, p_done=0.2):
    gen = torch.Generator().manual_seed(seed)
    terminated = torch.rand(n, t, 1, generator=gen) < p_done / 2
    truncated = (torch.rand(n, t, 1, generator=gen) < p_done / 2) & ~terminated
    return TensorDict(
        {
            "state_value": torch.randn(n, t, 1, generator=gen, dtype=dtype),
            "next": {
                "reward": torch.randn(n, t, 1, generator=gen, dtype=dtype),
                "state_value": torch.randn(n, t, 1, generator=gen, dtype=dtype),
                "terminated": terminated,
                "truncated": truncated,
                "done": terminated | truncated,
            },
        },
        batch_size=[n, t],
    )


def general(gae, td):
    """The general path: an explicit time_dim makes the fast path step aside."""
    return gae(td, time_dim=1)


class TestSameAsGeneralPath:
    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
    @pytest.mark.parametrize("given_is_init", [False, True])
    def test_two_consecutive_calls(self, dtype, given_is_init):
        fast, slow = RecurrentGAE(gamma=0.97, lmbda=0.9), RecurrentGAE(gamma=0.97, lmbda=0.9)
        for seed in (1, 2):
            td = rollout(seed=seed, dtype=dtype)
            if given_is_init:
                td["is_init"] = torch.rand(5, 11, 1) < 0.3
            a, b = fast(td.clone()), general(slow, td.clone())
            assert set(a.keys(True)) == set(b.keys(True))
            for key in OUTPUTS if not given_is_init else OUTPUTS[:2]:
                assert torch.equal(a[key], b[key]), key
            assert torch.equal(fast._carry, slow._carry)

    def test_used_in_the_common_case(self):
        gae = RecurrentGAE(gamma=0.9, lmbda=0.9)
        td = rollout()
        carry = plain_gae(td, gae.tensor_keys, 0.9, 0.9, None)
        assert carry is not None and torch.equal(carry, td["next", "done"][:, -1, 0])
        assert set(OUTPUTS) <= set(td.keys())


def _named(td):
    td.refine_names("env", "time")
    return td


def _nan(td):
    td["next", "reward"][0, 0] = float("nan")
    return td


DECLINED = {
    "extra_batch_dim": lambda td: td.unsqueeze(0),
    "named_dims": _named,
    "two_channels": lambda td: td.apply(lambda x: x.expand(*x.shape[:2], 2).clone()),
    "non_contiguous": lambda td: td.apply(lambda x: x.transpose(0, 1).contiguous().transpose(0, 1)),
    "float16": lambda td: td.apply(lambda x: x.half() if x.is_floating_point() else x),
    "int_flags": lambda td: td.set(("next", "done"), td["next", "done"].int()),
    "mixed_dtypes": lambda td: td.set("state_value", td["state_value"].double()),
    "missing_value": lambda td: td.exclude("state_value"),
    "non_bool_is_init": lambda td: td.set("is_init", torch.zeros(5, 11, 1)),
    "nan_reward": _nan,
}


class TestDeclines:
    @pytest.mark.parametrize("case", list(DECLINED))
    def test_declines_and_writes_nothing(self, case):
        td = DECLINED[case](rollout())
        before = set(td.keys(True, True))
        assert plain_gae(td, RecurrentGAE(0.9, 0.9).tensor_keys, 0.9, 0.9, None) is None
        assert set(td.keys(True, True)) == before

    def test_carry_of_another_size(self):
        keys = RecurrentGAE(0.9, 0.9).tensor_keys
        assert plain_gae(rollout(), keys, 0.9, 0.9, torch.zeros(3, dtype=torch.bool)) is None

    @pytest.mark.parametrize(
        ("case", "error"),
        [("missing_value", ValueError), ("int_flags", TypeError), ("nan_reward", ValueError)],
    )
    def test_general_path_then_raises(self, case, error):
        with pytest.raises(error):
            RecurrentGAE(gamma=0.9, lmbda=0.9)(DECLINED[case](rollout()))
