"""Warp envs and LSTM policies in torchrl's Ray collectors, writing to the served replay.

Envs are built from constructors inside Ray workers (their Warp kernels compile or load from
the cache there) and must step exactly as they do here. A ``RayCollector`` with two workers,
each a ``CartPoleEnv`` and an ``LSTMModule`` policy, writes whole trajectories into the
prioritized sequence-replay service; the learner's windows carry the recurrent states the
actors used, and a weight update from the learner reaches the actors.
"""

from __future__ import annotations

from functools import partial

import pytest
import torch
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.collectors.distributed import RayCollector
from torchrl.envs import Compose, EnvBase, InitTracker, TransformedEnv
from torchrl.modules import LSTMModule, QValueModule

from torchrl_ext import Sequence
from torchrl_ext.distributed import prioritized_ray_buffer
from torchrl_ext.envs import CartPoleEnv, CourseEnv

ray = pytest.importorskip("ray", reason="needs ray (pip install 'torchrl_ext[ray]')")

# The first task starts a Ray worker that imports torch and Warp and builds the env's kernels:
# minutes on a loaded 2-core CPU. A bound against a hang, not a speed check.
TIMEOUT = 300
HIDDEN = 8
BURN_IN, LENGTH = 4, 6


def make_lstm() -> LSTMModule:
    return LSTMModule(input_size=2, hidden_size=HIDDEN, in_key="observation", out_key="embed")


def make_policy() -> TensorDictSequential:
    torch.manual_seed(0)
    head = TensorDictModule(nn.Linear(HIDDEN, 2), in_keys=["embed"], out_keys=["action_value"])
    return TensorDictSequential(make_lstm(), head, QValueModule(action_space="categorical"))


def make_env(seed: int) -> TransformedEnv:
    """A partially observable CartPole batch that stores the LSTM's states in its data."""
    env = CartPoleEnv(4, seed=seed, observe_velocity=False, max_steps=30)
    return TransformedEnv(env, Compose(InitTracker(), make_lstm().make_tensordict_primer()))


def zero_action_rollout(env, steps: int):
    return env.rollout(
        steps,
        policy=lambda td: td.set("action", env.action_spec.zero()),
        break_when_any_done=False,
    )


def remote_rollout(env_or_constructor, steps: int):
    """Runs in a Ray worker: builds (or unpickles) the env there and rolls it out."""
    env = env_or_constructor
    if not isinstance(env, EnvBase):
        env = env()
    return zero_action_rollout(env, steps)


CONSTRUCTORS = {
    "cartpole": partial(CartPoleEnv, 3, seed=5, max_steps=20),
    "course": partial(CourseEnv, 3, seed=5, max_steps=20),
}


class TestWarpEnvsOnRay:
    """An env built in a Ray worker, or sent to one, steps exactly as it does here."""

    @pytest.mark.parametrize("name", sorted(CONSTRUCTORS))
    def test_built_from_constructor_in_worker(self, ray_local, name):
        constructor = CONSTRUCTORS[name]
        got = ray.get(ray.remote(remote_rollout).remote(constructor, 25), timeout=TIMEOUT)
        expected = zero_action_rollout(constructor(), 25)
        assert (got == expected).all()
        assert bool(got["next", "done"].any())  # the run crossed auto-resets

    @pytest.mark.parametrize("name", sorted(CONSTRUCTORS))
    def test_sent_mid_episode_to_worker(self, ray_local, name):
        env = CONSTRUCTORS[name]()
        zero_action_rollout(env, 7)
        got = ray.get(ray.remote(remote_rollout).remote(env, 10), timeout=TIMEOUT)
        expected = zero_action_rollout(env, 10)  # the local env goes on from the same state
        assert (got == expected).all()


class TestRayCollectorIntoServedReplay:
    """Two Ray collectors, LSTM policy, Warp CartPole, one prioritized sequence replay."""

    def test_recurrent_states_windows_and_weight_updates(self, ray_local):
        unit = Sequence(length=LENGTH, burn_in=BURN_IN, layout="batch_time")
        rb = prioritized_ray_buffer(
            4096, sample_unit=unit, batch_size=16, remote_config={"num_cpus": 0}
        )
        policy = make_policy()
        collector = RayCollector(
            [partial(make_env, 1), partial(make_env, 2)],
            policy=policy,
            frames_per_batch=40,
            total_frames=1_000_000,
            replay_buffer=rb,
            trajs_per_batch=1,
            remote_configs={"num_cpus": 1},
        )
        try:
            collector.update_policy_weights_()
            batches = iter(collector)
            for _ in range(4):
                next(batches)
            first = len(rb)
            assert first > 0
            with torch.no_grad():  # a learner step: the head now always prefers action 0
                policy[1].module.bias.copy_(torch.tensor([1000.0, -1000.0]))
            collector.update_policy_weights_()
            for _ in range(10):
                next(batches)
            newest = rb[len(rb) - 1]
            assert float(newest["action_value"][0] - newest["action_value"][1]) > 1000
            oldest = rb[0]
            assert float(oldest["action_value"].abs().max()) < 100
            # whole trajectories only: the first record starts an episode, from a zero state
            assert bool(oldest["is_init"].all()) and not oldest["recurrent_state_h"].any()

            sample = rb.sample()
            assert sample.shape == torch.Size([16, BURN_IN + LENGTH])
            self._check_stored_states(sample, policy[0])
        finally:
            collector.shutdown()
            rb.close()

    @staticmethod
    def _check_stored_states(sample, lstm: LSTMModule) -> None:
        """Each valid record's stored state is the LSTM step from the record before it."""
        valid = sample["validity_mask"].reshape(sample.shape)
        is_init = sample["is_init"].reshape(sample.shape)
        assert bool(is_init[:, 0].all())
        pairs = valid[:, :-1] & valid[:, 1:] & ~is_init[:, 1:]
        assert bool(pairs.any())
        step = sample[:, :-1][pairs].clone()
        step["is_init"] = torch.zeros(step.shape + (1,), dtype=torch.bool)
        with torch.no_grad():
            out = lstm(step.exclude("next"))
        for key in ("recurrent_state_h", "recurrent_state_c"):
            following = sample[:, 1:][pairs][key]
            torch.testing.assert_close(out["next", key], following, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(sample[:, :-1][pairs]["next", key], following)
