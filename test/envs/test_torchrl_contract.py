"""The key env paths checked against TorchRL's public API only.

Every env runs reset, step, step_and_maybe_reset, rollout and a ``Collector``; the fused paths
that build TorchRL data themselves (``step_and_maybe_reset``'s next root, the policy-free
``rollout``) are compared with what TorchRL's public functions build from the same data.
"""

import pytest
import torch
from tensordict import TensorDict
from torchrl.collectors import Collector
from torchrl.envs import EnvBase
from torchrl.envs.utils import check_env_specs, step_mdp

from torchrl_ext.envs import CartPoleEnv, CourseEnv, PendulumEnv

N = 6
MAKERS = {
    "cartpole": lambda seed: CartPoleEnv(N, seed=seed, max_steps=8),
    "pendulum": lambda seed: PendulumEnv(N, seed=seed, max_steps=8),
    "course": lambda seed: CourseEnv(N, seed=seed, max_steps=8),
}


def _public_step_mdp(env: EnvBase, data: TensorDict) -> TensorDict:
    """The next root as TorchRL's public ``step_mdp`` builds it for ``env``."""
    return step_mdp(
        data,
        exclude_action=False,
        reward_keys=env.reward_keys,
        done_keys=env.done_keys,
        action_keys=env.action_keys,
    )


def _assert_equal(a: TensorDict, b: TensorDict) -> None:
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    for key in a.keys(True, True):
        assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize("name", sorted(MAKERS))
class TestTorchRLContract:
    """Our envs through TorchRL's public entry points behave as any TorchRL env."""

    def test_check_env_specs(self, name):
        check_env_specs(MAKERS[name](0), seed=None)

    def test_step_returns_next_in_the_specs(self, name):
        env = MAKERS[name](1)
        td = env.rand_action(env.reset())
        out = env.step(td)
        assert env.full_observation_spec.is_in(out["next"].select(*env.observation_keys))
        assert env.full_done_spec.is_in(out["next"].select(*env.done_keys))

    def test_fused_root_equals_public_step_mdp_when_nothing_is_done(self, name):
        env = MAKERS[name](2)
        root = env.reset()
        root["policy_extra"] = torch.arange(N, dtype=torch.float32)
        root = env.rand_action(root)
        data, nxt = env.step_and_maybe_reset(root)
        assert not bool(data["next", "done"].any())
        _assert_equal(nxt, _public_step_mdp(env, data))

    def test_fused_step_equals_public_step_then_reset(self, name):
        """Over resets: our fused step against TorchRL's public step, step_mdp and reset."""
        fused, stock = MAKERS[name](3), MAKERS[name](3)
        root_f, root_s = fused.reset(), stock.reset()
        gen = torch.Generator().manual_seed(3)
        resets = 0
        for _ in range(20):
            action = fused.action_spec.rand()
            if action.is_floating_point():
                action = torch.rand(action.shape, generator=gen) * 2 - 1
            else:
                action = torch.randint(0, 2, action.shape, generator=gen)
            root_f["action"], root_s["action"] = action.clone(), action.clone()
            data_f, root_f = fused.step_and_maybe_reset(root_f)
            data_s = stock.step(root_s)
            root_s = _public_step_mdp(stock, data_s)
            done = root_s["done"].clone()
            if bool(done.any()):
                resets += 1
                root_s["_reset"] = done
                reset = stock.reset(root_s.clone())
                root_s = root_s.exclude("_reset").where(~done.view(N), reset, pad=0)
            _assert_equal(data_f, data_s)
            _assert_equal(root_f, root_s)
        assert resets >= 2

    def test_rollout_and_collector(self, name):
        env = MAKERS[name](4)
        data = env.rollout(12, break_when_any_done=False)
        assert data.batch_size == torch.Size([N, 12])
        assert env.full_done_spec.is_in(data["next"][:, -1].select(*env.done_keys))
        collector = Collector(MAKERS[name](5), None, frames_per_batch=N * 10, total_frames=-1)
        try:
            batch = next(iter(collector))
        finally:
            collector.shutdown()
        assert batch.numel() == N * 10
        assert bool(batch["next", "done"].any())
