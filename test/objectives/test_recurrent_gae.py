"""Tests for torchrl_ext.objectives.RecurrentGAE.

Oracles: a slow float64 Python loop for GAE, an explicit LSTMCell/GRUCell loop for the
recurrent value recompute, hand-computed cases, and torchrl's GAE where torchrl is right.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.collectors import Collector
from torchrl.data import Composite, LazyTensorStorage, ReplayBuffer, Unbounded
from torchrl.envs import Compose, EnvBase, InitTracker, StepCounter, TransformedEnv
from torchrl.modules import (
    GRUModule,
    LSTMModule,
    ProbabilisticActor,
    TanhNormal,
    set_recurrent_mode,
)
from torchrl.objectives import ClipPPOLoss

from torchrl_ext.objectives import RecurrentGAE, carry_recurrent_state

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

# torchrl.collectors defines deprecated weight-updater classes at import time
pytestmark = pytest.mark.filterwarnings("ignore:Creating .*WeightUpdater:DeprecationWarning")


# ---------------------------------------------------------------- oracles and data
def reference_gae(reward, value, next_value, terminated, done, gamma, lmbda):
    """The textbook recursion, one env and one channel at a time, in float64 Python."""
    reward, value, next_value = (
        np.asarray(x, dtype=np.float64) for x in (reward, value, next_value)
    )
    n_envs, steps = reward.shape
    advantage = np.zeros((n_envs, steps))
    for n in range(n_envs):
        running = 0.0
        for t in reversed(range(steps)):
            bootstrap = 0.0 if terminated[n][t] else gamma * next_value[n, t]
            delta = reward[n, t] + bootstrap - value[n, t]
            running = delta + (0.0 if done[n][t] else gamma * lmbda * running)
            advantage[n, t] = running
    return advantage, advantage + value


def make_flags(n, t, mode, gen):
    """Terminated/truncated flags for a mode in {'neither','terminated','truncated','both'}."""
    terminated = torch.zeros(n, t, 1, dtype=torch.bool)
    truncated = torch.zeros(n, t, 1, dtype=torch.bool)
    if mode in ("terminated", "both"):
        terminated = torch.rand(n, t, 1, generator=gen) < 0.15
    if mode in ("truncated", "both"):
        truncated = (torch.rand(n, t, 1, generator=gen) < 0.15) & ~terminated
    return terminated, truncated


def make_rollout(n=4, t=9, mode="both", seed=0, dtype=torch.float32, feature=(1,)):
    gen = torch.Generator().manual_seed(seed)
    terminated, truncated = make_flags(n, t, mode, gen)
    shape = (n, t, *feature)
    return TensorDict(
        {
            "state_value": torch.randn(shape, generator=gen).to(dtype),
            "next": {
                "reward": torch.randn(shape, generator=gen).to(dtype),
                "terminated": terminated,
                "truncated": truncated,
                "done": terminated | truncated,
                "state_value": torch.randn(shape, generator=gen).to(dtype),
            },
        },
        batch_size=[n, t],
    )


def reference_on(td, gamma, lmbda):
    """Runs :func:`reference_gae` on an env-major ``[N, T]`` rollout with one channel."""
    return reference_gae(
        td["next", "reward"][..., 0].double().numpy(),
        td["state_value"][..., 0].double().numpy(),
        td["next", "state_value"][..., 0].double().numpy(),
        td["next", "terminated"][..., 0].numpy(),
        td["next", "done"][..., 0].numpy(),
        gamma,
        lmbda,
    )


TOL = {
    torch.float64: 1e-10,
    torch.float32: 1e-4,
    torch.float16: 3e-2,
    torch.bfloat16: 1e-1,
}


class TestRecurrentGAEScan:
    """GAE bootstraps on terminated, cuts the trace on done, on every layout and dtype.

    A truncated step keeps its bootstrap from ``("next", "state_value")`` (the value of the
    true final observation); outputs keep the input's layout; ``value_target = advantage +
    value``.
    """

    @pytest.mark.parametrize("mode", ["neither", "terminated", "truncated", "both"])
    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
    @pytest.mark.parametrize("steps", [9, 12])
    @pytest.mark.parametrize("device", DEVICES)
    def test_env_major_matches_reference(self, mode, dtype, steps, device):
        """float32/float64 run natively (numba on the CPU, Warp on CUDA); float16/bfloat16 are
        computed in float32 and cast back."""
        td = make_rollout(mode=mode, dtype=dtype, seed=3, t=steps)
        out = RecurrentGAE(gamma=0.97, lmbda=0.9)(td.to(device))
        assert out["advantage"].device.type == device and out["advantage"].dtype == dtype
        td.update(out.cpu())
        adv, target = reference_on(td, 0.97, 0.9)
        tol = {"atol": TOL[dtype] * 10, "rtol": TOL[dtype]}
        np.testing.assert_allclose(td["advantage"][..., 0].double(), adv, **tol)
        np.testing.assert_allclose(td["value_target"][..., 0].double(), target, **tol)

    @pytest.mark.parametrize("mode", ["terminated", "truncated", "both"])
    def test_time_major_with_time_dim(self, mode):
        td = make_rollout(mode=mode, seed=4, dtype=torch.float64)
        expected, _ = reference_on(td, 0.9, 0.8)
        time_major = td.transpose(0, 1).contiguous()
        RecurrentGAE(gamma=0.9, lmbda=0.8, time_dim=0)(time_major)
        assert time_major["advantage"].shape == (9, 4, 1)
        np.testing.assert_allclose(time_major["advantage"][..., 0].T, expected, atol=1e-10)
        assert torch.equal(
            time_major["is_init"].transpose(0, 1)[:, 1:, 0], td["next", "done"][:, :-1, 0]
        )

    def test_time_dim_argument_overrides_and_named_dims(self):
        td = make_rollout(seed=5, dtype=torch.float64)
        expected, _ = reference_on(td, 0.9, 0.8)
        time_major = td.transpose(0, 1).contiguous()
        RecurrentGAE(gamma=0.9, lmbda=0.8)(time_major, time_dim=0)
        np.testing.assert_allclose(time_major["advantage"][..., 0].T, expected, atol=1e-10)
        named = td.transpose(0, 1).contiguous()
        named.names = ["time", "env"]
        RecurrentGAE(gamma=0.9, lmbda=0.8)(named)
        np.testing.assert_allclose(named["advantage"][..., 0].T, expected, atol=1e-10)

    @pytest.mark.parametrize("where", ["module", "call"])
    def test_time_dim_disagreeing_with_dim_names_is_refused(self, where):
        named = make_rollout(seed=5).transpose(0, 1).contiguous()
        named.names = ["time", "env"]
        gae = RecurrentGAE(gamma=0.9, lmbda=0.8, time_dim=1 if where == "module" else None)
        kwargs = {"time_dim": -1} if where == "call" else {}
        with pytest.raises(ValueError, match=r"time_dim=-?1.*'time'.*dim 0"):
            gae(named, **kwargs)
        assert "advantage" not in named.keys()
        gae_agrees = RecurrentGAE(gamma=0.9, lmbda=0.8, time_dim=0)
        gae_agrees(named)  # a time_dim that names the same dim is fine
        assert "advantage" in named.keys()

    def test_unaligned_contiguous_inputs(self):
        """Contiguous float32 data starting at an odd offset (the CPU kernel takes it)."""
        td = make_rollout(t=8, seed=10)
        expected, _ = reference_on(td, 0.9, 0.8)
        for key in ("state_value", ("next", "reward"), ("next", "done")):
            x = td[key]
            buffer = torch.zeros(x.numel() + 1, dtype=x.dtype)
            buffer[1:] = x.reshape(-1)
            td[key] = buffer[1:].view(x.shape)
        assert td["state_value"].storage_offset() == 1
        RecurrentGAE(gamma=0.9, lmbda=0.8)(td)
        np.testing.assert_allclose(td["advantage"][..., 0], expected, atol=1e-5)

    def test_extra_leading_batch_dims(self):
        td = make_rollout(n=6, seed=6, dtype=torch.float64)
        expected, _ = reference_on(td, 0.95, 0.95)
        nested = td.reshape(2, 3, 9)
        RecurrentGAE(gamma=0.95, lmbda=0.95)(nested)
        np.testing.assert_allclose(nested["advantage"].reshape(6, 9), expected, atol=1e-10)

    def test_non_contiguous_env_major_view(self):
        td = make_rollout(seed=7, dtype=torch.float64)
        expected, _ = reference_on(td, 0.9, 0.7)
        view = td.transpose(0, 1).contiguous().transpose(0, 1)
        RecurrentGAE(gamma=0.9, lmbda=0.7)(view)
        np.testing.assert_allclose(view["advantage"][..., 0], expected, atol=1e-10)

    def test_exact_hand_computed(self):
        """gamma = lmbda = 0.5, V = 0, rewards 1, 2, 3, next values 0, 4, 16.

        delta_2 = 3 + 0.5 * 16 = 11; delta_1 = 2 + 0.5 * 4 unless terminated at t=1.
        """
        cases = {
            # (terminated, truncated) at t=1 -> expected advantages
            (False, False): [1 + 0.25 * (4 + 0.25 * 11), 4 + 0.25 * 11, 11.0],
            (True, False): [1 + 0.25 * 2, 2.0, 11.0],
            (False, True): [1 + 0.25 * (2 + 0.5 * 4), 2 + 0.5 * 4, 11.0],
        }
        for (term, trunc), expected in cases.items():
            terminated = torch.tensor([[False, term, False]]).unsqueeze(-1)
            truncated = torch.tensor([[False, trunc, False]]).unsqueeze(-1)
            next_value = torch.tensor([[[0.0], [4.0], [16.0]]])
            td = TensorDict(
                {
                    "state_value": torch.zeros(1, 3, 1, dtype=torch.float64),
                    "next": {
                        "reward": torch.tensor([[[1.0], [2.0], [3.0]]], dtype=torch.float64),
                        "terminated": terminated,
                        "done": terminated | truncated,
                        "state_value": next_value.double(),
                    },
                },
                batch_size=[1, 3],
            )
            RecurrentGAE(gamma=0.5, lmbda=0.5)(td)
            assert td["advantage"][0, :, 0].tolist() == expected, (term, trunc)
            assert torch.equal(td["value_target"], td["advantage"])

    def test_gamma_zero_and_one(self):
        td = make_rollout(seed=8, dtype=torch.float64)
        RecurrentGAE(gamma=0.0, lmbda=1.0)(td)
        expected = td["next", "reward"] - td["state_value"]
        torch.testing.assert_close(td["advantage"], expected)
        td = make_rollout(seed=8, dtype=torch.float64)
        RecurrentGAE(gamma=1.0, lmbda=1.0)(td)
        adv, _ = reference_on(td, 1.0, 1.0)
        np.testing.assert_allclose(td["advantage"][..., 0], adv, atol=1e-10)

    def test_set_keys(self):
        td = make_rollout(seed=9, dtype=torch.float64)
        expected, _ = reference_on(td, 0.9, 0.9)
        renamed = TensorDict(
            {
                "v": td["state_value"],
                "next": {
                    "r": td["next", "reward"],
                    "term": td["next", "terminated"],
                    "d": td["next", "done"],
                    "v": td["next", "state_value"],
                },
            },
            batch_size=td.batch_size,
        )
        gae = RecurrentGAE(gamma=0.9, lmbda=0.9).set_keys(
            value="v",
            reward="r",
            terminated="term",
            done="d",
            advantage="adv",
            value_target="vt",
            is_init="first",
        )
        gae(renamed)
        np.testing.assert_allclose(renamed["adv"][..., 0], expected, atol=1e-10)
        assert {"adv", "vt", "first"} <= set(renamed.keys())
        assert "advantage" not in renamed.keys()
        with pytest.raises(ValueError, match="unknown key name 'rewards'"):
            gae.set_keys(rewards="r")

    def test_in_and_out_keys(self):
        gae = RecurrentGAE(gamma=0.9, lmbda=0.9)
        assert ("next", "reward") in gae.in_keys and ("next", "state_value") in gae.in_keys
        assert {"advantage", "value_target", "is_init"} <= set(gae.out_keys)


class TestIsInit:
    """``is_init[t] = done[t-1]``; ``is_init[:, 0]`` carries over between calls per env."""

    @pytest.mark.parametrize("mode", ["neither", "terminated", "truncated", "both"])
    def test_derived_is_done_shifted(self, mode):
        td = make_rollout(mode=mode, seed=11)
        RecurrentGAE(gamma=0.9, lmbda=0.9)(td)
        is_init = td["is_init"]
        assert is_init.dtype is torch.bool and is_init.shape == (4, 9, 1)
        assert is_init[:, 0].all()
        assert torch.equal(is_init[:, 1:], td["next", "done"][:, :-1])
        if mode == "neither":
            assert not is_init[:, 1:].any()

    def test_truncation_resets_but_still_bootstraps(self):
        td = make_rollout(mode="truncated", seed=12, dtype=torch.float64)
        RecurrentGAE(gamma=0.9, lmbda=0.9)(td)
        truncated = td["next", "truncated"][..., 0]
        assert truncated.any()
        n, t = torch.nonzero(truncated)[0].tolist()
        if t + 1 < 9:
            assert td["is_init"][n, t + 1, 0]
        delta = (
            td["next", "reward"][n, t]
            + 0.9 * td["next", "state_value"][n, t]
            - td["state_value"][n, t]
        )
        torch.testing.assert_close(td["advantage"][n, t], delta)

    def test_carry_in_across_two_calls(self):
        gae = RecurrentGAE(gamma=0.9, lmbda=0.9)
        first = make_rollout(n=6, seed=13)
        first["next", "done"][:3, -1] = True
        first["next", "done"][3:, -1] = False
        gae(first)
        second = make_rollout(n=6, seed=14)
        gae(second)
        assert second["is_init"][:, 0, 0].tolist() == [True] * 3 + [False] * 3
        third = make_rollout(n=6, seed=15)
        gae.reset_carry()
        gae(third)
        assert third["is_init"][:, 0].all()

    def test_given_is_init_is_used_and_not_rewritten(self):
        td = make_rollout(seed=16)
        given = torch.zeros(4, 9, 1, dtype=torch.bool)
        td["is_init"] = given
        RecurrentGAE(gamma=0.9, lmbda=0.9)(td)
        assert td["is_init"] is given or torch.equal(td["is_init"], given)
        assert not td["is_init"].any()

    def test_carry_with_changed_env_count_raises(self):
        gae = RecurrentGAE(gamma=0.9, lmbda=0.9)
        gae(make_rollout(n=4))
        td = make_rollout(n=5)
        with pytest.raises(ValueError, match="carry"):
            gae(td)
        assert "advantage" not in td.keys()


class TestBadInput:
    """Bad input raises a clear error naming the entry, and nothing is written."""

    def _assert_untouched(self, td, gae):
        assert not {"advantage", "value_target", "is_init"} & set(td.keys())
        assert gae._carry is None

    @pytest.mark.parametrize(
        "key",
        [
            ("next", "reward"),
            ("next", "done"),
            ("next", "terminated"),
            "state_value",
            ("next", "state_value"),
        ],
    )
    def test_missing_key_is_named(self, key):
        td = make_rollout()
        del td[key]
        gae = RecurrentGAE(gamma=0.9, lmbda=0.9)
        with pytest.raises(ValueError, match=str(key[-1] if isinstance(key, tuple) else key)):
            gae(td)
        self._assert_untouched(td, gae)

    @pytest.mark.parametrize("key", [("next", "done"), ("next", "terminated")])
    def test_non_bool_flags(self, key):
        td = make_rollout()
        td[key] = td[key].float()
        gae = RecurrentGAE(gamma=0.9, lmbda=0.9)
        with pytest.raises(TypeError, match=f"{key[-1]}.*dtype=torch.float32"):
            gae(td)
        self._assert_untouched(td, gae)

    def test_non_bool_is_init(self):
        td = make_rollout()
        td["is_init"] = torch.zeros(4, 9, 1, dtype=torch.uint8)
        with pytest.raises(TypeError, match="is_init"):
            RecurrentGAE(gamma=0.9, lmbda=0.9)(td)

    def test_integer_reward(self):
        td = make_rollout()
        td["next", "reward"] = torch.ones(4, 9, 1, dtype=torch.int64)
        with pytest.raises(TypeError, match="reward"):
            RecurrentGAE(gamma=0.9, lmbda=0.9)(td)

    def test_mismatched_value_shape(self):
        td = make_rollout()
        td["state_value"] = torch.zeros(4, 9, 2)
        gae = RecurrentGAE(gamma=0.9, lmbda=0.9)
        with pytest.raises(ValueError, match=r"state_value.*\(2,\).*reward"):
            gae(td)
        self._assert_untouched(td, gae)

    def test_mismatched_done_shape(self):
        td = make_rollout()
        td["next", "done"] = torch.zeros(4, 9, 3, dtype=torch.bool)
        with pytest.raises(ValueError, match="done"):
            RecurrentGAE(gamma=0.9, lmbda=0.9)(td)

    @pytest.mark.parametrize("key", ["state_value", ("next", "state_value"), ("next", "reward")])
    @pytest.mark.parametrize("steps", [9, 12])
    @pytest.mark.parametrize("lmbda", [0.0, 0.9])
    @pytest.mark.parametrize("device", DEVICES)
    def test_nan_values(self, key, steps, lmbda, device):
        td = make_rollout(t=steps).to(device)
        td["next", "terminated"][2, 3] = True
        td["next", "done"][2, 3] = True
        td[key][2, 3, 0] = float("nan")
        gae = RecurrentGAE(gamma=0.9, lmbda=lmbda)
        name = (
            key[-1] if isinstance(key, str) else repr(key).replace("(", r"\(").replace(")", r"\)")
        )
        with pytest.raises(ValueError, match=f"NaN values in .*{name}"):
            gae(td)
        self._assert_untouched(td, gae)

    @pytest.mark.parametrize("steps", [8, 9])
    def test_infinite_values(self, steps):
        td = make_rollout(t=steps)
        td["state_value"][1, 2, 0] = float("inf")
        gae = RecurrentGAE(gamma=0.9, lmbda=0.9)
        with pytest.raises(ValueError, match="infinite values in \\['state_value'\\]"):
            gae(td)
        self._assert_untouched(td, gae)

    def test_overflow_is_not_bad_input(self):
        """Finite inputs whose advantage overflows raise nothing, as in a plain loop."""
        td = make_rollout(mode="neither")
        td["next", "reward"][0, :, 0] = 3e38
        RecurrentGAE(gamma=1.0, lmbda=1.0)(td)
        assert torch.isinf(td["advantage"][0, 0, 0]) and td["advantage"][1:].isfinite().all()

    def test_no_time_dim(self):
        td = TensorDict({}, batch_size=[])
        with pytest.raises(ValueError, match="batch_size"):
            RecurrentGAE(gamma=0.9, lmbda=0.9)(td)
        with pytest.raises(ValueError, match="time_dim=2"):
            RecurrentGAE(gamma=0.9, lmbda=0.9, time_dim=2)(make_rollout())
        with pytest.raises(ValueError, match=r"empty rollout, batch_size=\(0, 9\)"):
            RecurrentGAE(gamma=0.9, lmbda=0.9)(make_rollout()[:0])

    @pytest.mark.parametrize(
        ("kwargs", "error", "match"),
        [
            ({"gamma": 1.5, "lmbda": 0.9}, ValueError, "gamma=1.5"),
            ({"gamma": 0.9, "lmbda": -0.1}, ValueError, "lmbda=-0.1"),
            ({"gamma": "0.9", "lmbda": 0.9}, TypeError, "gamma='0.9'"),
            ({"gamma": float("nan"), "lmbda": 0.9}, ValueError, "gamma=nan"),
            ({"gamma": 0.9, "lmbda": float("inf")}, ValueError, "lmbda=inf"),
            ({"gamma": True, "lmbda": 0.9}, TypeError, "gamma=True"),
            ({"gamma": 0.9, "lmbda": 0.9, "initial_state": "last"}, ValueError, "state='last'"),
            ({"gamma": 0.9, "lmbda": 0.9, "initial_state": 0}, TypeError, "initial_state=0"),
            ({"gamma": 0.9, "lmbda": 0.9, "chunk_len": 0}, ValueError, "chunk_len=0"),
            ({"gamma": 0.9, "lmbda": 0.9, "chunk_len": 4.0}, TypeError, r"chunk_len=4\.0"),
            ({"gamma": 0.9, "lmbda": 0.9, "time_dim": 1.0}, TypeError, r"time_dim=1\.0"),
            (
                {"gamma": 0.9, "lmbda": 0.9, "value_network": torch.nn.Linear(2, 1)},
                TypeError,
                "Linear",
            ),
        ],
    )
    def test_constructor_arguments(self, kwargs, error, match):
        with pytest.raises(error, match=match):
            RecurrentGAE(**kwargs)

    @pytest.mark.parametrize("name", ["gamma", "lmbda"])
    @pytest.mark.parametrize(
        "value", [torch.tensor([0.9, 0.8]), torch.ones(1, 2), torch.tensor(0.9j)]
    )
    def test_non_scalar_tensor_coefficient_is_named(self, name, value):
        kwargs = {"gamma": 0.9, "lmbda": 0.9, name: value}
        with pytest.raises(TypeError, match=f"{name} must be a real number.*{name}=tensor"):
            RecurrentGAE(**kwargs)

    def test_scalar_tensor_and_numpy_coefficients_work(self):
        gae = RecurrentGAE(gamma=torch.tensor(0.5, dtype=torch.float64), lmbda=np.float32(0.25))
        assert (gae.gamma, gae.lmbda) == (0.5, 0.25)
        td = make_rollout()
        gae(td)
        adv, _ = reference_on(td, 0.5, 0.25)
        np.testing.assert_allclose(td["advantage"][..., 0], adv, atol=1e-5)

    @pytest.mark.parametrize("shape", [(4, 9, 2), (4, 9, 1, 1), (4, 9, 3, 1)])
    @pytest.mark.parametrize("time_dim", [None, 1])
    def test_is_init_of_more_than_one_flag_per_step(self, shape, time_dim):
        """``time_dim=None`` takes the fast path, ``time_dim=1`` the general one."""
        td = make_rollout()
        td["is_init"] = torch.zeros(shape, dtype=torch.bool)
        gae = RecurrentGAE(gamma=0.9, lmbda=0.9, time_dim=time_dim)
        with pytest.raises(ValueError, match=rf"'is_init'.*got shape \({shape[0]}, 9, {shape[2]}"):
            gae(td)
        assert not {"advantage", "value_target"} & set(td.keys())
        assert gae._carry is None

    @pytest.mark.parametrize("shape", [(4, 9), (4, 9, 1)])
    def test_is_init_of_one_flag_per_step_is_accepted(self, shape):
        td = make_rollout()
        td["is_init"] = torch.zeros(shape, dtype=torch.bool)
        RecurrentGAE(gamma=0.9, lmbda=0.9)(td)
        assert td["is_init"].shape == shape and td["advantage"].shape == (4, 9, 1)

    def test_float_time_dim_in_forward(self):
        td = make_rollout()
        with pytest.raises(TypeError, match=r"time_dim=1\.0"):
            RecurrentGAE(gamma=0.9, lmbda=0.9)(td, time_dim=1.0)
        assert "advantage" not in td.keys()

    def test_set_keys_checks_all_before_renaming(self):
        gae = RecurrentGAE(gamma=0.9, lmbda=0.9)
        with pytest.raises(TypeError, match="done=3"):
            gae.set_keys(reward="r", done=3)
        with pytest.raises(ValueError, match="reward=''"):
            gae.set_keys(reward="")
        assert gae.tensor_keys.reward == "reward"


class TestMultiAgent:
    """Per-agent rewards/values under a group share one done; each agent uses its own stream."""

    def test_matches_per_agent_single_runs(self):
        gen = torch.Generator().manual_seed(21)
        n, t, agents = 3, 11, 4
        terminated, truncated = make_flags(n, t, "both", gen)
        done = terminated | truncated
        td = TensorDict(
            {
                "agents": TensorDict(
                    {
                        "observation": torch.randn(n, t, agents, 5, generator=gen),
                        "state_value": torch.randn(n, t, agents, 1, generator=gen),
                    },
                    batch_size=[n, t, agents],
                ),
                "next": {
                    "agents": TensorDict(
                        {
                            "reward": torch.randn(n, t, agents, 1, generator=gen),
                            "state_value": torch.randn(n, t, agents, 1, generator=gen),
                        },
                        batch_size=[n, t, agents],
                    ),
                    "done": done,
                    "terminated": terminated,
                },
            },
            batch_size=[n, t],
        )
        gae = RecurrentGAE(gamma=0.95, lmbda=0.9).set_keys(
            reward=("agents", "reward"),
            value=("agents", "state_value"),
            advantage=("agents", "advantage"),
            value_target=("agents", "value_target"),
        )
        gae(td)
        assert td["agents", "advantage"].shape == (n, t, agents, 1)
        for agent in range(agents):
            single = TensorDict(
                {
                    "state_value": td["agents", "state_value"][:, :, agent],
                    "next": {
                        "reward": td["next", "agents", "reward"][:, :, agent],
                        "state_value": td["next", "agents", "state_value"][:, :, agent],
                        "done": done,
                        "terminated": terminated,
                    },
                },
                batch_size=[n, t],
            )
            RecurrentGAE(gamma=0.95, lmbda=0.9)(single)
            torch.testing.assert_close(td["agents", "advantage"][:, :, agent], single["advantage"])

    def test_per_agent_done(self):
        td = make_rollout(n=2, t=7, feature=(3, 1), seed=22, dtype=torch.float64)
        gen = torch.Generator().manual_seed(1)
        td["next", "terminated"] = torch.rand(2, 7, 3, 1, generator=gen) < 0.3
        td["next", "done"] = td["next", "terminated"].clone()
        RecurrentGAE(gamma=0.9, lmbda=0.9)(td)
        for agent in range(3):
            adv, _ = reference_gae(
                td["next", "reward"][:, :, agent, 0],
                td["state_value"][:, :, agent, 0],
                td["next", "state_value"][:, :, agent, 0],
                td["next", "terminated"][:, :, agent, 0],
                td["next", "done"][:, :, agent, 0],
                0.9,
                0.9,
            )
            np.testing.assert_allclose(td["advantage"][:, :, agent, 0], adv, atol=1e-10)


@st.composite
def rollouts(draw):
    n = draw(st.integers(1, 5))
    t = draw(st.integers(1, 12))
    seed = draw(st.integers(0, 2**16))
    mode = draw(st.sampled_from(["neither", "terminated", "truncated", "both"]))
    return make_rollout(n=n, t=t, mode=mode, seed=seed, dtype=torch.float64)


class TestInvariants:
    """Invariants over random layouts (hypothesis)."""

    @settings(max_examples=40, deadline=None)
    @given(td=rollouts(), gamma=st.floats(0, 1), lmbda=st.floats(0, 1))
    def test_reference_and_target(self, td, gamma, lmbda):
        RecurrentGAE(gamma=gamma, lmbda=lmbda)(td)
        adv, target = reference_on(td, gamma, lmbda)
        np.testing.assert_allclose(td["advantage"][..., 0], adv, atol=1e-9)
        np.testing.assert_allclose(td["value_target"][..., 0], target, atol=1e-9)

    @settings(max_examples=30, deadline=None)
    @given(td=rollouts(), seed=st.integers(0, 1000))
    def test_nothing_flows_back_across_done(self, td, seed):
        """Changing rewards after a done step leaves advantages up to it unchanged."""
        gae = RecurrentGAE(gamma=0.99, lmbda=0.95)
        before = gae(td.clone())["advantage"]
        done = td["next", "done"][..., 0]
        after_done = torch.cumsum(done.long(), dim=1) - done.long() > 0
        changed = td.clone()
        noise = torch.randn(
            changed["next", "reward"].shape, generator=torch.Generator().manual_seed(seed)
        )
        changed["next", "reward"] += noise.double() * after_done.unsqueeze(-1)
        after = RecurrentGAE(gamma=0.99, lmbda=0.95)(changed)["advantage"]
        keep = ~after_done
        assert torch.allclose(before[keep], after[keep])
        assert math.isfinite(float(after.sum()))


# ---------------------------------------------------------------- value networks
OBS = 3
HIDDEN = 8


def make_critic(kind="lstm", seed=0, num_layers=1):
    torch.manual_seed(seed)  # test-only; the autouse fixture restores the global RNG
    if kind == "lstm":
        rnn = LSTMModule(
            input_size=OBS,
            hidden_size=HIDDEN,
            num_layers=num_layers,
            in_keys=["observation", "rs_h", "rs_c"],
            out_keys=["embed", ("next", "rs_h"), ("next", "rs_c")],
        )
    else:
        rnn = GRUModule(
            input_size=OBS,
            hidden_size=HIDDEN,
            num_layers=num_layers,
            in_keys=["observation", "rs_h"],
            out_keys=["embed", ("next", "rs_h")],
        )
    head = TensorDictModule(nn.Linear(HIDDEN, 1), in_keys=["embed"], out_keys=["state_value"])
    return TensorDictSequential(rnn, head), rnn, head


def make_obs_rollout(n=4, t=10, mode="both", seed=0, num_layers=1):
    """Observations consistent with auto-reset: obs[t+1] == next obs[t] unless done[t]."""
    gen = torch.Generator().manual_seed(seed)
    terminated, truncated = make_flags(n, t, mode, gen)
    done = terminated | truncated
    obs = torch.randn(n, t, OBS, generator=gen)
    next_obs = torch.randn(n, t, OBS, generator=gen)
    next_obs[:, :-1] = torch.where(done[:, :-1], next_obs[:, :-1], obs[:, 1:])
    is_init = torch.zeros_like(done)
    is_init[:, 0] = True
    is_init[:, 1:] = done[:, :-1]
    return TensorDict(
        {
            "observation": obs,
            "is_init": is_init,
            "rs_h": torch.randn(n, t, num_layers, HIDDEN, generator=gen),
            "rs_c": torch.randn(n, t, num_layers, HIDDEN, generator=gen),
            "next": {
                "observation": next_obs,
                "reward": torch.randn(n, t, 1, generator=gen),
                "terminated": terminated,
                "truncated": truncated,
                "done": done,
            },
        },
        batch_size=[n, t],
    )


def reference_values(rnn, head, td, initial_state="zeros", chunk_len=None):
    """Step-by-step recurrent evaluation with explicit resets, one env at a time."""
    layer = rnn.lstm if isinstance(rnn, LSTMModule) else rnn.gru
    is_lstm = isinstance(rnn, LSTMModule)
    n_envs, steps = td.batch_size
    value = torch.zeros(n_envs, steps, 1)
    next_value = torch.zeros(n_envs, steps, 1)

    def step(x, state):
        out, state = layer(x.view(1, 1, -1), state)
        return head.module(out.view(-1)), state

    for n in range(n_envs):
        state = None
        for t in range(steps):
            reset = bool(td["is_init"][n, t]) or (t > 0 and bool(td["next", "done"][n, t - 1]))
            anchor = t == 0 or (chunk_len is not None and t % chunk_len == 0)
            if reset:
                state = None
            elif anchor:
                if initial_state == "stored":
                    h = td["rs_h"][n, t].unsqueeze(1)
                    state = (h, td["rs_c"][n, t].unsqueeze(1)) if is_lstm else h
                else:
                    state = None
            value[n, t], state = step(td["observation"][n, t], state)
            if bool(td["next", "done"][n, t]) or t == steps - 1:
                next_value[n, t], _ = step(td["next", "observation"][n, t], state)
        next_value[n, :-1] = torch.where(
            td["next", "done"][n, :-1], next_value[n, :-1], value[n, 1:]
        )
    return value, next_value


class TestRecurrentCritic:
    """One recurrent pass over whole rows, resetting at is_init, bootstrapping truncations.

    Values equal a step-by-step loop with explicit resets; the first step of an episode sees
    a fresh zero state (no leak); ``"stored"`` starts rows (and ``chunk_len`` anchors) from the
    stored recurrent state.
    """

    @pytest.mark.parametrize("kind", ["lstm", "gru"])
    @pytest.mark.parametrize("mode", ["neither", "terminated", "truncated", "both"])
    @pytest.mark.parametrize("device", DEVICES)
    def test_values_match_step_loop(self, kind, mode, device):
        critic, rnn, head = make_critic(kind)
        td = make_obs_rollout(mode=mode, seed=31)
        with torch.no_grad():
            value, next_value = reference_values(rnn, head, td)
        out = RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=critic.to(device))(td.to(device))
        td.update(out.cpu())
        torch.testing.assert_close(td["state_value"], value, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(td["next", "state_value"], next_value, atol=1e-5, rtol=1e-5)
        adv, _ = reference_gae(
            td["next", "reward"][..., 0], value[..., 0], next_value[..., 0],
            td["next", "terminated"][..., 0], td["next", "done"][..., 0], 0.9, 0.9,
        )  # fmt: skip
        np.testing.assert_allclose(td["advantage"][..., 0], adv, atol=1e-4)

    @pytest.mark.parametrize("kind", ["lstm", "gru"])
    @pytest.mark.parametrize("chunk_len", [None, 3])
    def test_stored_initial_state(self, kind, chunk_len):
        critic, rnn, head = make_critic(kind, num_layers=2)
        td = make_obs_rollout(seed=32, num_layers=2)
        td["is_init"][1, 0] = False
        td["is_init"][2, 0] = False
        with torch.no_grad():
            value, next_value = reference_values(rnn, head, td, "stored", chunk_len)
            zeros, _ = reference_values(rnn, head, td, "zeros", chunk_len)
        assert not torch.allclose(value[1:3, 0], zeros[1:3, 0])
        gae = RecurrentGAE(
            gamma=0.9, lmbda=0.9, value_network=critic, initial_state="stored", chunk_len=chunk_len
        )
        gae(td)
        torch.testing.assert_close(td["state_value"], value, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(td["next", "state_value"], next_value, atol=1e-5, rtol=1e-5)

    @pytest.mark.parametrize("kind", ["lstm", "gru"])
    @pytest.mark.parametrize("initial_state", ["zeros", "stored"])
    def test_long_rows_match_step_loop(self, kind, initial_state):
        # segments of 71, 42 and 30 steps (bootstrap included) run as pieces of 64, 32, 16, 8,
        # 4, 2 and 1 steps, each piece starting from the state the one before it reached
        critic, rnn, head = make_critic(kind, num_layers=2)
        td = make_obs_rollout(n=3, t=70, mode="neither", seed=34, num_layers=2)
        td["next", "truncated"][1, 40] = True
        td["next", "done"][1, 40] = True
        td["is_init"][1, 41] = True
        td["is_init"][2, 0] = False
        with torch.no_grad():
            value, next_value = reference_values(rnn, head, td, initial_state)
        RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=critic, initial_state=initial_state)(td)
        torch.testing.assert_close(td["state_value"], value, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(td["next", "state_value"], next_value, atol=1e-5, rtol=1e-5)

    def test_time_major_input(self):
        critic, _, _ = make_critic("lstm")
        td = make_obs_rollout(seed=37)
        time_major = td.transpose(0, 1).contiguous()
        RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=critic)(td)
        RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=critic, time_dim=0)(time_major)
        for key in ("state_value", ("next", "state_value"), "advantage"):
            torch.testing.assert_close(time_major[key].transpose(0, 1), td[key])

    def test_zeros_with_chunk_len(self):
        critic, rnn, head = make_critic("lstm")
        td = make_obs_rollout(seed=33, t=11)
        with torch.no_grad():
            value, _ = reference_values(rnn, head, td, "zeros", chunk_len=4)
        RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=critic, chunk_len=4)(td)
        torch.testing.assert_close(td["state_value"], value, atol=1e-5, rtol=1e-5)

    def test_no_leak_across_episodes(self):
        critic, rnn, head = make_critic("lstm")
        td = make_obs_rollout(seed=34, mode="both", n=6, t=12)
        RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=critic)(td)
        starts = torch.nonzero(td["is_init"][:, 1:, 0])
        assert len(starts) > 0
        for n, t in (starts + torch.tensor([0, 1])).tolist():
            with torch.no_grad():
                fresh, _ = rnn.lstm(td["observation"][n, t].view(1, 1, -1))
                fresh = head.module(fresh.view(-1))
                carried_over = head.module(
                    rnn.lstm(td["observation"][n, t - 1].view(1, 1, -1))[0].view(-1)
                )
            torch.testing.assert_close(td["state_value"][n, t], fresh, atol=1e-6, rtol=1e-6)
            if t >= 2 and not td["is_init"][n, t - 1]:
                # the last step of the old episode carries state: not a fresh forward
                assert not torch.allclose(td["state_value"][n, t - 1], carried_over, atol=1e-6)

    def test_missing_stored_state_is_named(self):
        critic, _, _ = make_critic("lstm")
        td = make_obs_rollout(seed=35)
        del td["rs_c"]
        gae = RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=critic, initial_state="stored")
        with pytest.raises(ValueError, match="rs_c"):
            gae(td)
        assert "advantage" not in td.keys()

    @pytest.mark.parametrize(
        ("kind", "key", "shape", "expected"),
        [
            ("lstm", "rs_h", (4, 10, 1, 7), (4, 10, 1, 8)),  # hidden size
            ("lstm", "rs_c", (4, 10, 2, 8), (4, 10, 1, 8)),  # num_layers
            ("lstm", "rs_c", (4, 10, 8), (4, 10, 1, 8)),  # no layer dim
            ("gru", "rs_h", (4, 10, 3, 8), (4, 10, 1, 8)),
        ],
    )
    def test_stored_state_of_wrong_shape(self, kind, key, shape, expected):
        critic, _, _ = make_critic(kind)
        td = make_obs_rollout(seed=35)
        td[key] = torch.zeros(shape)
        gae = RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=critic, initial_state="stored")
        with pytest.raises(ValueError, match=rf"'{key}' has shape \({shape[0]}.*expects") as info:
            gae(td)
        assert str(expected) in str(info.value)
        assert not {"advantage", "value_target", "state_value"} & set(td.keys())

    def test_stored_state_with_fewer_layers_is_not_broadcast(self):
        """A one-layer state would broadcast over a two-layer critic's pool: refused."""
        critic, _, _ = make_critic("gru", num_layers=2)
        td = make_obs_rollout(seed=35, num_layers=1)
        gae = RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=critic, initial_state="stored")
        with pytest.raises(ValueError, match=r"'rs_h' has shape \(4, 10, 1, 8\).*\(4, 10, 2, 8\)"):
            gae(td)
        assert "advantage" not in td.keys()
        gae.initial_state = "zeros"  # zeros never reads the stored state
        gae(td)

    def test_stored_state_must_be_floating_point(self):
        critic, _, _ = make_critic("lstm")
        td = make_obs_rollout(seed=35)
        td["rs_h"] = td["rs_h"].long()
        gae = RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=critic, initial_state="stored")
        with pytest.raises(TypeError, match=r"rs_h.*dtype=torch\.int64"):
            gae(td)

    def test_observation_and_next_observation_must_agree(self):
        critic, _, _ = make_critic("lstm")
        td = make_obs_rollout(seed=36)
        td["observation"] = torch.zeros(4, 10, OBS + 1)
        with pytest.raises(ValueError, match=r"'observation' has shape \(4,\) per step.*\(3,\)"):
            RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=critic)(td)
        td["observation"] = torch.zeros(4, 10, OBS, dtype=torch.float64)
        with pytest.raises(TypeError, match=r"dtype=torch\.float64.*dtype=torch\.float32"):
            RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=critic)(td)
        assert "advantage" not in td.keys()

    def test_observation_must_fit_the_recurrent_layer(self):
        critic, _, _ = make_critic("gru")
        td = make_obs_rollout(seed=36)
        for key in ("observation", ("next", "observation")):
            td[key] = torch.zeros(4, 10, OBS + 2)
        with pytest.raises(ValueError, match=r"'observation' feeds.*input_size=3.*\(5,\)"):
            RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=critic)(td)
        assert "advantage" not in td.keys()

    def test_missing_next_observation_is_named(self):
        critic, _, _ = make_critic("gru")
        td = make_obs_rollout(seed=36)
        del td["next", "observation"]
        with pytest.raises(ValueError, match="'next', 'observation'"):
            RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=critic)(td)

    def test_python_based_lstm_is_rejected(self):
        rnn = LSTMModule(
            input_size=OBS, hidden_size=4, in_key="observation", out_key="e", python_based=True
        )
        with pytest.raises(TypeError, match="python_based"):
            RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=rnn)


class TestFeedForwardCritic:
    """A feed-forward critic agrees with torchrl's GAE (true next observations everywhere)."""

    @pytest.mark.parametrize("mode", ["terminated", "truncated", "both"])
    def test_agrees_with_torchrl_gae(self, mode):
        from torchrl.objectives.value import GAE

        torch.manual_seed(41)
        critic = TensorDictModule(
            nn.Sequential(nn.Linear(OBS, 16), nn.Tanh(), nn.Linear(16, 1)),
            in_keys=["observation"],
            out_keys=["state_value"],
        )
        td = make_obs_rollout(seed=42, mode=mode, n=5, t=13)
        theirs = td.clone()
        GAE(gamma=0.95, lmbda=0.9, value_network=critic)(theirs)
        RecurrentGAE(gamma=0.95, lmbda=0.9, value_network=critic)(td)
        torch.testing.assert_close(td["advantage"], theirs["advantage"], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(td["value_target"], theirs["value_target"])
        torch.testing.assert_close(td["next", "state_value"], theirs["next", "state_value"])

    def test_agrees_with_torchrl_gae_on_precomputed_values(self):
        from torchrl.objectives.value import GAE

        td = make_rollout(n=6, t=17, mode="both", seed=43)
        theirs = td.clone()
        GAE(gamma=0.99, lmbda=0.95, value_network=None)(theirs)
        RecurrentGAE(gamma=0.99, lmbda=0.95)(td)
        torch.testing.assert_close(td["advantage"], theirs["advantage"], atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- torchrl integration
class TinyEnv(EnvBase):
    """Batched env with random observations that terminates with probability ``p_end``."""

    def __init__(self, n, p_end=0.3, seed=0):
        super().__init__(batch_size=[n])
        self.observation_spec = Composite(observation=Unbounded(shape=(n, OBS)), shape=(n,))
        self.action_spec = Unbounded(shape=(n, 1))
        self.reward_spec = Unbounded(shape=(n, 1))
        self.p_end = p_end
        self._gen = torch.Generator().manual_seed(seed)
        self._obs = torch.zeros(n, OBS)

    def _flags(self, value):
        return value.clone(), value

    def _reset(self, td):
        mask = td.get("_reset", None) if td is not None else None
        fresh = torch.randn(self._obs.shape, generator=self._gen)
        self._obs = fresh if mask is None else torch.where(mask.view(-1, 1), fresh, self._obs)
        done, terminated = self._flags(torch.zeros(*self.batch_size, 1, dtype=torch.bool))
        return TensorDict(
            {"observation": self._obs.clone(), "done": done, "terminated": terminated},
            batch_size=self.batch_size,
        )

    def _step(self, td):
        self._obs = torch.randn(self._obs.shape, generator=self._gen)
        ended = torch.rand(*self.batch_size, 1, generator=self._gen) < self.p_end
        done, terminated = self._flags(ended)
        return TensorDict(
            {
                "observation": self._obs.clone(),
                "reward": td["action"].clamp(-1, 1),
                "done": done,
                "terminated": terminated,
            },
            batch_size=self.batch_size,
        )

    def _set_seed(self, seed):
        self._gen.manual_seed(0 if seed is None else seed)


def make_env(rnn, n=5, seed=0):
    transforms = Compose(InitTracker(), StepCounter(max_steps=4), rnn.make_tensordict_primer())
    return TransformedEnv(TinyEnv(n, seed=seed), transforms)


def make_policy(rnn):
    head = TensorDictModule(nn.Linear(HIDDEN, 1), in_keys=["embed"], out_keys=["action"])
    return TensorDictSequential(rnn, head)


def collect(env, policy, n, t, batches, **kwargs):
    collector = Collector(
        env, policy, frames_per_batch=n * t, total_frames=n * t * batches, **kwargs
    )
    out = [batch.clone() for batch in collector]
    collector.shutdown()
    return out


class TestTorchRLIntegration:
    """Collector warm start, collector postproc, ClipPPOLoss estimator, replay-buffer transform."""

    def test_collector_carries_state_across_batches(self):
        _, rnn, _ = make_critic("lstm")
        batches = collect(make_env(rnn), make_policy(rnn), n=5, t=6, batches=4)
        cases = set()
        for prev, cur in itertools.pairwise(batches):
            done_last = prev["next", "done"][:, -1, 0]
            assert torch.equal(cur["is_init"][:, 0, 0], done_last)
            for key in ("rs_h", "rs_c"):
                expected = torch.where(
                    done_last.view(-1, 1, 1), torch.zeros(()), prev["next", key][:, -1]
                )
                torch.testing.assert_close(cur[key][:, 0], expected)
            cases.update(done_last.tolist())
            carried = carry_recurrent_state(prev, ["rs_h", "rs_c"])
            assert torch.equal(carried["is_init"][:, 0], done_last)
            torch.testing.assert_close(carried["rs_h"], cur["rs_h"][:, 0])
        assert cases == {True, False}, "both carry cases must occur for this test to mean much"

    def test_derived_is_init_matches_init_tracker(self):
        _, rnn, _ = make_critic("lstm")
        batches = collect(make_env(rnn, seed=1), make_policy(rnn), n=5, t=6, batches=3)
        gae = RecurrentGAE(gamma=0.9, lmbda=0.9)
        for batch in batches:
            tracked = batch["is_init"].clone()
            batch["state_value"] = torch.zeros(5, 6, 1)
            batch["next", "state_value"] = torch.zeros(5, 6, 1)
            del batch["is_init"]
            gae(batch)
            assert torch.equal(batch["is_init"], tracked)

    def test_stored_states_from_collector(self):
        """With the critic's own states collected, "stored" matches a step loop from them."""
        critic, rnn, head = make_critic("lstm")
        batch = collect(make_env(rnn, seed=2), make_policy(rnn), n=5, t=6, batches=2)[1]
        assert not batch["is_init"][:, 0].all()
        with torch.no_grad():
            value, next_value = reference_values(rnn, head, batch, "stored")
        gae = RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=critic, initial_state="stored")
        gae(batch)
        torch.testing.assert_close(batch["state_value"], value, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(batch["next", "state_value"], next_value, atol=1e-5, rtol=1e-5)

    def test_collector_postproc(self):
        critic, rnn, _ = make_critic("lstm")
        gae = RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=critic)
        env = make_env(rnn, seed=3)
        batches = collect(env, make_policy(rnn), n=5, t=6, batches=2, postproc=gae)
        for batch in batches:
            assert batch["advantage"].shape == (5, 6, 1)
            again = batch.exclude("advantage", "value_target")
            RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=critic)(again)
            torch.testing.assert_close(batch["advantage"], again["advantage"])

    def test_clip_ppo_loss_value_estimator(self):
        critic, rnn, _ = make_critic("lstm")
        torch.manual_seed(5)
        actor = ProbabilisticActor(
            TensorDictSequential(
                TensorDictModule(nn.Linear(OBS, 2), in_keys=["observation"], out_keys=["p"]),
                TensorDictModule(NormalParamExtractor(), in_keys=["p"], out_keys=["loc", "scale"]),
            ),
            in_keys=["loc", "scale"],
            distribution_class=TanhNormal,
            return_log_prob=True,
        )
        batch = collect(make_env(rnn, seed=4), actor, n=5, t=6, batches=1)[0]
        gae = RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=critic)
        loss = ClipPPOLoss(actor, critic)
        loss.make_value_estimator(gae)
        assert loss.value_estimator is gae
        with set_recurrent_mode(True):
            inside = loss(batch.clone())
            outside = loss(RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=critic)(batch.clone()))
        torch.testing.assert_close(inside["loss_objective"], outside["loss_objective"])
        torch.testing.assert_close(inside["loss_critic"], outside["loss_critic"])

    def test_replay_buffer_transform(self):
        td = make_rollout(n=3, t=5, seed=51)
        expected = RecurrentGAE(gamma=0.9, lmbda=0.8)(td.clone())["advantage"]
        rb = ReplayBuffer(
            storage=LazyTensorStorage(32, ndim=2),
            transform=RecurrentGAE(gamma=0.9, lmbda=0.8).as_transform(),
        )
        rb.extend(td)
        assert "advantage" not in td.keys()
        torch.testing.assert_close(rb[:]["advantage"], expected)
        sample = rb.sample(4)
        assert "advantage" in sample.keys()

    def test_value_estimate_leaves_input_and_carry(self):
        td = make_rollout(seed=52)
        gae = RecurrentGAE(gamma=0.9, lmbda=0.8)
        target = gae.value_estimate(td)
        assert "value_target" not in td.keys() and gae._carry is None
        torch.testing.assert_close(target, gae(td)["value_target"])


class TwoAgentCritic(nn.Module):
    """Per-agent values from per-agent observations of different sizes."""

    def __init__(self):
        super().__init__()
        self.scout = nn.Linear(2, 1)
        self.carrier = nn.Linear(5, 1)

    def forward(self, scout_obs, carrier_obs):
        return torch.stack([self.scout(scout_obs), self.carrier(carrier_obs)], dim=-2)


class TestMultiAgentCritic:
    """A feed-forward multi-agent critic: each agent's advantage from its own value stream."""

    def test_matches_per_agent_single_runs(self):
        torch.manual_seed(61)
        gen = torch.Generator().manual_seed(62)
        n, t = 3, 10
        terminated, truncated = make_flags(n, t, "both", gen)
        done = terminated | truncated
        sizes = {"scout": 2, "carrier": 5}
        obs = {k: torch.randn(n, t, d, generator=gen) for k, d in sizes.items()}
        next_obs = {k: torch.randn(n, t, d, generator=gen) for k, d in sizes.items()}
        for k in sizes:
            next_obs[k][:, :-1] = torch.where(done[:, :-1], next_obs[k][:, :-1], obs[k][:, 1:])
        td = TensorDict(
            {
                "agents": {f"{k}_obs": v for k, v in obs.items()},
                "next": {
                    "agents": {
                        **{f"{k}_obs": v for k, v in next_obs.items()},
                        "reward": torch.randn(n, t, 2, 1, generator=gen),
                    },
                    "done": done,
                    "terminated": terminated,
                },
            },
            batch_size=[n, t],
        )
        module = TwoAgentCritic()
        critic = TensorDictModule(
            module,
            in_keys=[("agents", "scout_obs"), ("agents", "carrier_obs")],
            out_keys=[("agents", "state_value")],
        )
        gae = RecurrentGAE(gamma=0.9, lmbda=0.8, value_network=critic).set_keys(
            reward=("agents", "reward"),
            value=("agents", "state_value"),
            advantage=("agents", "advantage"),
            value_target=("agents", "value_target"),
        )
        gae(td)
        assert td["agents", "advantage"].shape == (n, t, 2, 1)
        for agent, (name, layer) in enumerate(
            (("scout", module.scout), ("carrier", module.carrier))
        ):
            with torch.no_grad():
                value = layer(obs[name])
                next_value = layer(next_obs[name])
            adv, _ = reference_gae(
                td["next", "agents", "reward"][:, :, agent, 0],
                value[..., 0],
                next_value[..., 0],
                terminated[..., 0],
                done[..., 0],
                0.9,
                0.8,
            )
            np.testing.assert_allclose(td["agents", "advantage"][:, :, agent, 0], adv, atol=1e-5)


class TestCarryRecurrentState:
    """For hand-collected rollouts: final states carry over unless the last step was done."""

    def test_time_dim_and_reset(self):
        done = torch.zeros(6, 3, 1, dtype=torch.bool)
        done[-1, 1] = True
        rollout = TensorDict(
            {"next": {"done": done, "h": torch.randn(6, 3, 2, 4)}}, batch_size=[6, 3]
        )
        start = carry_recurrent_state(rollout, ["h"], time_dim=0)
        assert start.batch_size == (3,)
        assert start["is_init"][:, 0].tolist() == [False, True, False]
        torch.testing.assert_close(start["h"][0], rollout["next", "h"][-1, 0])
        assert not start["h"][1].any()

    def test_bad_input(self):
        rollout = TensorDict({"next": {"done": torch.zeros(2, 3, 1)}}, batch_size=[2, 3])
        with pytest.raises(TypeError, match=r"done.*dtype=torch\.float32"):
            carry_recurrent_state(rollout, ["h"])
        rollout["next", "done"] = rollout["next", "done"].bool()
        with pytest.raises(ValueError, match="'next', 'h'"):
            carry_recurrent_state(rollout, ["h"])
        with pytest.raises(ValueError, match="time_dim=5"):
            carry_recurrent_state(rollout, ["h"], time_dim=5)


# ---------------------------------------------------------------- fuzzing bad input
_bad_coefficients = st.one_of(
    st.floats().filter(lambda x: not 0.0 <= x <= 1.0),  # NaN and infinities included
    st.text(max_size=3),
    st.none(),
    st.booleans(),
    st.lists(st.floats(0, 1), max_size=2),
    st.sampled_from(
        [torch.tensor([0.9, 0.8]), torch.tensor(1.5), torch.tensor(0.5j), torch.tensor(True)]
    ),
)
_not_ints = st.one_of(
    st.floats(), st.text(max_size=2), st.booleans(), st.just(torch.tensor([1, 2]))
)
_FLAGS = [("next", "done"), ("next", "terminated"), "is_init"]
_FLOATS = [("next", "reward"), "state_value", ("next", "state_value")]


def _leaves(td):
    return {k: td.get(k) for k in td.keys(include_nested=True, leaves_only=True)}


def assert_same_td(td, snapshot):
    """Same keys and bitwise the same values (NaN where NaN was)."""
    now, before = _leaves(td), _leaves(snapshot)
    assert now.keys() == before.keys()
    for key, x in now.items():
        y = before[key]
        assert x.dtype == y.dtype and x.shape == y.shape, key
        assert torch.equal(x, y) or torch.allclose(x, y, rtol=0, atol=0, equal_nan=True), key


def gae_state(gae):
    carry = None if gae._carry is None else gae._carry.clone()
    keys = dataclasses.asdict(gae.tensor_keys)
    return gae.gamma, gae.lmbda, gae.initial_state, gae.chunk_len, gae.time_dim, keys, carry


def assert_same_gae_state(state, before):
    *now, carry = state
    *then, old = before
    assert now == then
    assert (carry is None and old is None) or torch.equal(carry, old)


@st.composite
def bad_rollouts(draw):
    """A valid ``[4, 9]`` rollout with one thing wrong: ``(td, time_dim passed to forward)``."""
    td = make_rollout(seed=draw(st.integers(0, 2**16)))
    n, t = td.batch_size
    kind = draw(
        st.sampled_from(
            [
                "missing",
                "flag_dtype",
                "value_dtype",
                "value_shape",
                "flag_shape",
                "nonfinite",
                "time_dim",
            ]
        )
    )
    time_dim = None
    if kind == "missing":
        del td[draw(st.sampled_from([*_FLAGS[:2], *_FLOATS]))]
    elif kind == "flag_dtype":
        dtype = draw(st.sampled_from([torch.float32, torch.int64, torch.uint8, torch.float64]))
        td[draw(st.sampled_from(_FLAGS))] = torch.zeros(n, t, 1, dtype=dtype)
    elif kind == "value_dtype":
        dtype = draw(st.sampled_from([torch.int32, torch.int64, torch.bool, torch.complex64]))
        td[draw(st.sampled_from(_FLOATS))] = torch.ones(n, t, 1, dtype=dtype)
    elif kind == "value_shape":
        td[draw(st.sampled_from(_FLOATS))] = torch.zeros(n, t, draw(st.integers(2, 4)))
    elif kind == "flag_shape":
        shape = (n, t, *draw(st.lists(st.integers(2, 3), min_size=1, max_size=2)))
        td[draw(st.sampled_from(_FLAGS))] = torch.zeros(shape, dtype=torch.bool)
    elif kind == "nonfinite":
        key = draw(st.sampled_from(_FLOATS))
        where = (draw(st.integers(0, n - 1)), draw(st.integers(0, t - 1)), 0)
        td[key][where] = draw(st.sampled_from([float("nan"), float("inf"), -float("inf")]))
    else:
        time_dim = draw(st.one_of(_not_ints, st.integers(2, 10), st.integers(-10, -3)))
    return td, time_dim


class TestFuzzBadInput:
    """Random bad arguments and inputs raise TypeError or ValueError (hypothesis).

    Never another exception, and nothing changes: neither the estimator (coefficients, keys,
    carry), nor the critic's parameters, nor the input tensordict.
    """

    @settings(max_examples=50, deadline=None)
    @given(
        which=st.sampled_from(["gamma", "lmbda", "initial_state", "chunk_len", "time_dim", "net"]),
        data=st.data(),
    )
    def test_constructor(self, which, data):
        kwargs = {"gamma": 0.9, "lmbda": 0.95}
        if which in ("gamma", "lmbda"):
            kwargs[which] = data.draw(_bad_coefficients)
        elif which == "initial_state":
            kwargs[which] = data.draw(
                st.one_of(
                    st.text(max_size=6).filter(lambda s: s not in ("zeros", "stored")),
                    st.integers(),
                    st.none(),
                )
            )
        elif which == "chunk_len":
            kwargs[which] = data.draw(st.one_of(_not_ints, st.integers(max_value=0)))
        elif which == "time_dim":
            kwargs[which] = data.draw(_not_ints)
        else:
            kwargs["value_network"] = data.draw(
                st.sampled_from([nn.Linear(2, 1), "critic", 3, lambda td: td])
            )
        with pytest.raises((TypeError, ValueError)):
            RecurrentGAE(**kwargs)

    @settings(max_examples=50, deadline=None)
    @given(bad=bad_rollouts(), general=st.booleans())
    def test_forward(self, bad, general):
        """``general`` sets the module's time_dim, which skips the plain fast path."""
        td, time_dim = bad
        gae = RecurrentGAE(gamma=0.9, lmbda=0.9, time_dim=1 if general else None)
        gae(make_rollout(seed=1))  # leaves a carry to keep
        before, snapshot = gae_state(gae), td.clone()
        with pytest.raises((TypeError, ValueError)):
            gae(td, time_dim=time_dim)
        assert_same_td(td, snapshot)
        assert_same_gae_state(gae_state(gae), before)

    @settings(max_examples=30, deadline=None)
    @given(
        kind=st.sampled_from(["lstm", "gru"]),
        key=st.sampled_from(["rs_h", "rs_c", "observation", ("next", "observation"), "both"]),
        change=st.sampled_from(["shape", "dtype", "missing"]),
        per_step=st.lists(st.integers(1, 9), min_size=1, max_size=3).filter(lambda s: s != [1, 8]),
    )
    def test_forward_with_recurrent_critic(self, kind, key, change, per_step):
        if kind == "gru" and key == "rs_c":
            key = "rs_h"  # a GRU has a single state
        critic, _, _ = make_critic(kind)
        td = make_obs_rollout(n=3, t=6, seed=3)
        keys = ["observation", ("next", "observation")] if key == "both" else [key]
        for key in keys:
            if change == "missing":
                del td[key]
            elif change == "dtype":
                td[key] = td[key].long()
            elif key in ("rs_h", "rs_c"):
                td[key] = torch.zeros(3, 6, *per_step)
            else:
                td[key] = torch.zeros(3, 6, OBS + per_step[0])  # the layer's input size is OBS
        gae = RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=critic, initial_state="stored")
        params = {k: v.clone() for k, v in critic.state_dict().items()}
        before, snapshot = gae_state(gae), td.clone()
        with pytest.raises((TypeError, ValueError)):
            gae(td)
        assert_same_td(td, snapshot)
        assert_same_gae_state(gae_state(gae), before)
        for k, v in critic.state_dict().items():
            assert torch.equal(v, params[k]), k
