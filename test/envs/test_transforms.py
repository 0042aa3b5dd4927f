"""``PreviousAction``: the previous step's action in each observation, zeros at episode starts.

(``BaseEnvState`` is tested with the saved state, in ``test_state_dicts.py``.)
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torch.nn.functional import one_hot
from torchrl.collectors import Collector
from torchrl.envs import Compose, InitTracker, TransformedEnv
from torchrl.envs.utils import check_env_specs

from torchrl_ext.envs import CartPoleEnv, PendulumEnv
from torchrl_ext.envs.popgym import BattleshipEnv
from torchrl_ext.envs.transforms import PreviousAction


def _expected(actions: torch.Tensor, starts: torch.Tensor, encode) -> torch.Tensor:
    """The slow reference: for a rollout ``[N, T]``, zeros at starts, else step t-1's action."""
    n, t = starts.shape
    rows = []
    for i in range(n):
        row = []
        for j in range(t):
            if j == 0 or bool(starts[i, j]):
                row.append(torch.zeros_like(encode(actions[i, 0])))
            else:
                row.append(encode(actions[i, j - 1]))
        rows.append(torch.stack(row))
    return torch.stack(rows)


class TestByHand:
    def test_two_steps_and_a_partial_reset(self):
        env = TransformedEnv(CartPoleEnv(3, seed=0), PreviousAction())
        td = env.reset()
        assert torch.equal(td["prev_action"], torch.zeros(3, 2))
        td["action"] = torch.tensor([1, 0, 1])
        td = env.step(td)["next"]
        assert td["prev_action"].tolist() == [[0.0, 1.0], [1.0, 0.0], [0.0, 1.0]]
        td["action"] = torch.tensor([0, 0, 1])
        td = env.step(td)["next"]
        assert td["prev_action"].tolist() == [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]
        td["_reset"] = torch.tensor([[False], [True], [False]])
        td = env.reset(td)
        assert td["prev_action"].tolist() == [[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]]

    def test_custom_keys(self):
        env = TransformedEnv(CartPoleEnv(2, seed=0), PreviousAction(out_key=("memory", "last")))
        td = env.reset()
        td["action"] = torch.tensor([0, 1])
        assert env.step(td)["next", "memory", "last"].tolist() == [[1.0, 0.0], [0.0, 1.0]]


class TestAgainstTheLoop:
    """Long rollouts with auto-resets, against the slow reference."""

    def test_categorical_through_auto_reset(self):
        env = TransformedEnv(CartPoleEnv(4, seed=1), Compose(InitTracker(), PreviousAction()))
        rollout = env.rollout(300, break_when_any_done=False)
        assert bool(rollout["is_init"][:, 1:].any()), "the rollout must cross episode ends"
        expected = _expected(
            rollout["action"], rollout["is_init"].squeeze(-1), lambda a: one_hot(a, 2).float()
        )
        assert torch.equal(rollout["prev_action"], expected)

    def test_multi_categorical_is_one_one_hot_per_component(self):
        env = TransformedEnv(BattleshipEnv(3, seed=2), Compose(InitTracker(), PreviousAction()))
        assert env.observation_spec["prev_action"].shape == (3, 16)
        rollout = env.rollout(200, break_when_any_done=False)
        assert bool(rollout["is_init"][:, 1:].any())

        def encode(action):
            return torch.cat([one_hot(action[0], 8), one_hot(action[1], 8)]).float()

        expected = _expected(rollout["action"], rollout["is_init"].squeeze(-1), encode)
        assert torch.equal(rollout["prev_action"], expected)

    def test_continuous_is_copied(self):
        env = TransformedEnv(PendulumEnv(2, seed=3), Compose(InitTracker(), PreviousAction()))
        rollout = env.rollout(250, break_when_any_done=False)
        assert bool(rollout["is_init"][:, 1:].any())
        expected = _expected(rollout["action"], rollout["is_init"].squeeze(-1), lambda a: a.float())
        assert torch.equal(rollout["prev_action"], expected)

    def test_collector_batches_carry_it_across_batches(self):
        env = TransformedEnv(CartPoleEnv(2, seed=4), Compose(InitTracker(), PreviousAction()))
        collector = Collector(env, None, frames_per_batch=2 * 40, total_frames=2 * 120)
        batches = torch.cat([b.clone() for b in collector], dim=1)
        collector.shutdown()
        expected = _expected(
            batches["action"], batches["is_init"].squeeze(-1), lambda a: one_hot(a, 2).float()
        )
        assert torch.equal(batches["prev_action"], expected)


@pytest.mark.parametrize("make", [lambda: CartPoleEnv(3, seed=0), lambda: PendulumEnv(3, seed=0),
                                  lambda: BattleshipEnv(3, seed=0)])  # fmt: skip
def test_specs(make):
    check_env_specs(TransformedEnv(make(), PreviousAction()), seed=None)


def test_reset_without_a_previous_entry_is_zeros():
    env = TransformedEnv(CartPoleEnv(2, seed=0), PreviousAction())
    td = env.reset(TensorDict({"_reset": torch.tensor([[True], [False]])}, [2]))
    assert torch.equal(td["prev_action"], torch.zeros(2, 2))


class TestRefusals:
    """An ``out_key`` that is, holds or lies inside an entry the env has is refused by name."""

    @pytest.mark.parametrize(
        "out_key",
        ["observation", "reward", "done", "action", "is_init", ("observation", "x"), ("next", "x")],
    )
    def test_a_key_the_env_has(self, out_key):
        env = TransformedEnv(
            CartPoleEnv(2, seed=0), Compose(InitTracker(), PreviousAction(out_key))
        )
        with pytest.raises(ValueError, match=r"out_key=.*collides"):
            env.rollout(2)

    def test_the_observation_is_kept_by_a_fresh_key(self):
        env = TransformedEnv(CartPoleEnv(2, seed=0), PreviousAction(out_key=("memory", "last")))
        assert env.observation_spec["observation"].shape == (2, 4)

    @pytest.mark.parametrize(
        ("kwargs", "error"),
        [
            ({"out_key": 3}, TypeError),
            ({"out_key": ""}, ValueError),
            ({"action_key": ()}, ValueError),
        ],
    )
    def test_bad_keys(self, kwargs, error):
        name = next(iter(kwargs))
        with pytest.raises(error, match=name):
            PreviousAction(**kwargs)
