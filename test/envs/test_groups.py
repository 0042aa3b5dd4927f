"""Agent groups on the authoring contract: nested keys, per-group rewards and per-group done.

``_PairEnv`` is two agents that each see a bit of their own on step 0 of an episode and must
repeat it on step 1 (the episode's last). Both groups get the team reward (the number of right
answers), and both carry the env's done flags. ``_ScoredPairEnv`` is the same game with a reward
per group (its own answer right or not), returned by ``advance`` as one vector.
"""

from typing import Any

import pytest
import torch
import warp as wp
from torchrl.collectors import Collector
from torchrl.data import Categorical, Composite, Unbounded
from torchrl.envs import EnvBase
from torchrl.envs.utils import check_env_specs

from torchrl_ext.envs.warp_env import WarpEnv, WarpFunctions, uniform64

GROUPS = ("left", "right")


@wp.func
def _start(s: Any, p: Any, i: int, key: wp.uint32):
    s.bits[i, 0] = wp.int32(uniform64(key, 0) < wp.float64(0.5))
    s.bits[i, 1] = wp.int32(uniform64(key, 1) < wp.float64(0.5))


@wp.func
def _advance(s: Any, p: Any, a: Any, i: int, step: int, key: wp.uint32):
    right = int(a.left_action[i] == wp.int64(s.bits[i, 0]))
    right += int(a.right_action[i] == wp.int64(s.bits[i, 1]))
    return wp.where(step == 1, float(right), 0.0), step == 1


@wp.func
def _advance_each(s: Any, p: Any, a: Any, i: int, step: int, key: wp.uint32):
    left = wp.where(a.left_action[i] == wp.int64(s.bits[i, 0]), 1.0, 0.0)
    right = wp.where(a.right_action[i] == wp.int64(s.bits[i, 1]), 1.0, 0.0)
    last = step == 1
    return wp.vec2(wp.where(last, left, 0.0), wp.where(last, right, 0.0)), last


@wp.func
def _observe(s: Any, p: Any, o: Any, i: int, step: int, key: wp.uint32):
    o.left_observation[i] = wp.where(step == 0, float(s.bits[i, 0]), -1.0)
    o.right_observation[i] = wp.where(step == 0, float(s.bits[i, 1]), -1.0)


class _PairEnv(WarpEnv):
    functions = WarpFunctions(_start, _advance, _observe)

    def __init__(self, num_envs, seed=None, group_done=True, **kwargs):
        self.group_done = group_done
        super().__init__(num_envs, "cpu", seed, **kwargs)

    def _make_specs(self):
        n = self.num_envs

        def groups(leaf, spec):
            return Composite(
                {g: Composite({leaf: spec.clone()}, shape=(n,)) for g in GROUPS}, shape=(n,)
            )

        self.observation_spec = groups("observation", Unbounded((n, 1)))
        self.full_action_spec = groups("action", Categorical(2, shape=(n,)))
        self.full_reward_spec = groups("reward", Unbounded((n, 1)))
        if self.group_done:  # the base adds terminated and truncated, and the root's flags
            self.full_done_spec = groups("done", Categorical(2, shape=(n, 1), dtype=torch.bool))

    def _state_arrays(self):
        return {"bits": (torch.int32, (2,))}


class _StockPairEnv(_PairEnv):
    _step_and_maybe_reset = EnvBase._step_and_maybe_reset


class _ScoredPairEnv(_PairEnv):
    rewards_per_entry = True
    functions = WarpFunctions(_start, _advance_each, _observe)


class _StockScoredPairEnv(_ScoredPairEnv):
    _step_and_maybe_reset = EnvBase._step_and_maybe_reset


def _flags_agree(td):
    for g in GROUPS:
        for flag in ("done", "terminated", "truncated"):
            assert torch.equal(td[g, flag], td[flag]), (g, flag)


class TestGroups:
    """Nested action, observation, reward and done entries placed by the base."""

    @pytest.mark.parametrize("group_done", [True, False])
    def test_specs_pass_torchrl_check(self, group_done):
        env = _PairEnv(4, seed=0, group_done=group_done)
        check_env_specs(env)
        keys = set(env.full_done_spec.keys(True, True))
        assert (("left", "truncated") in keys) is group_done
        assert {"done", "terminated", "truncated"} <= keys

    def test_group_flags_are_the_env_flags_in_every_output(self):
        env = _PairEnv(4, seed=1)
        root = env.reset()
        _flags_agree(root)
        for _ in range(5):
            root = env.rand_action(root)
            td, root = env.step_and_maybe_reset(root)
            _flags_agree(td["next"])
            _flags_agree(root)
            assert not bool(root["left", "done"].any())
        data = env.rollout(7, break_when_any_done=False)
        _flags_agree(data)
        _flags_agree(data["next"])
        done = data["next", "left", "done"][..., 0]
        assert torch.equal(done, (torch.arange(7) % 2 == 1).expand(4, 7))

    def test_hand_computed_rewards_reach_every_group(self):
        env = _PairEnv(3, seed=2)
        root = env.reset()
        bits = env._arrays["bits"].long()
        root["left", "action"] = bits[:, 0]
        root["right", "action"] = 1 - bits[:, 1]  # right always wrong: reward 1
        td, root = env.step_and_maybe_reset(root)
        assert (td["next", "left", "reward"] == 0).all()  # step 0 pays nothing
        root["left", "action"] = bits[:, 0]
        root["right", "action"] = 1 - bits[:, 1]
        td, root = env.step_and_maybe_reset(root)
        for g in GROUPS:
            assert td["next", g, "reward"].flatten().tolist() == [1.0, 1.0, 1.0]
        assert bool(td["next", "done"].all()) and bool(td["next", "right", "terminated"].all())
        assert td["next", "left", "observation"].flatten().tolist() == [-1.0] * 3

    def test_per_group_rewards_from_one_vector(self):
        env = _ScoredPairEnv(3, seed=2)
        check_env_specs(env)
        root = env.reset()
        bits = env._arrays["bits"].long()
        for _ in range(2):  # step 0 pays nothing; step 1: left right, right wrong
            root["left", "action"] = bits[:, 0]
            root["right", "action"] = 1 - bits[:, 1]
            td, root = env.step_and_maybe_reset(root)
        assert td["next", "left", "reward"].flatten().tolist() == [1.0, 1.0, 1.0]
        assert td["next", "right", "reward"].flatten().tolist() == [0.0, 0.0, 0.0]
        assert bool(td["next", "done"].all())

    @pytest.mark.parametrize(
        ("fast_cls", "stock_cls"),
        [(_PairEnv, _StockPairEnv), (_ScoredPairEnv, _StockScoredPairEnv)],
    )
    def test_rollout_equals_generic_steps(self, fast_cls, stock_cls):
        fast, stock = fast_cls(5, seed=3), stock_cls(5, seed=3)
        data = fast.rollout(9, break_when_any_done=False)
        root = stock.reset()
        for t in range(9):
            for g in GROUPS:
                root[g, "action"] = data[g, "action"][:, t]
            step, root = stock.step_and_maybe_reset(root)
            for key in step.keys(True, True):
                assert torch.equal(data[:, t].get(key), step.get(key)), (t, key)

    def test_collector_batches_group_flags(self):
        collector = Collector(_PairEnv(4, seed=4), None, frames_per_batch=16, total_frames=16)
        batch = next(iter(collector))
        collector.shutdown()
        assert batch.shape == (4, 4)
        assert torch.equal(batch["next", "right", "done"], batch["next", "done"])


class _DeepDone(_PairEnv):
    def _make_specs(self):
        super()._make_specs()
        n = self.num_envs
        inner = Composite(done=Categorical(2, shape=(n, 1), dtype=torch.bool), shape=(n,))
        self.full_done_spec = Composite(left=Composite(inner=inner, shape=(n,)), shape=(n,))


class _ReservedState(_PairEnv):
    def _state_arrays(self):
        return {"bits": (torch.int32, (2,)), "steps": torch.int32}


class _WideReward(_PairEnv):
    def _make_specs(self):
        super()._make_specs()
        self.full_reward_spec = Composite(
            reward=Unbounded((self.num_envs, 2)), shape=(self.num_envs,)
        )


class _NotFunctions(_PairEnv):
    functions = (_start, _advance, _observe)


class TestAuthoringErrors:
    """Mistakes in a declaration are refused at construction, naming what is wrong."""

    @pytest.mark.parametrize(
        ("cls", "error", "match"),
        [
            (_DeepDone, ValueError, "done entries must be"),
            (_ReservedState, ValueError, "'steps'"),
            (_WideReward, ValueError, r"reward entry 'reward' must have shape \(4, 1\)"),
            (_NotFunctions, TypeError, "functions must be WarpFunctions"),
        ],
    )
    def test_refused(self, cls, error, match):
        with pytest.raises(error, match=match):
            cls(4, seed=0)
