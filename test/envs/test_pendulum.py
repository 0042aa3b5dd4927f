import math

import numpy as np
import pytest
import torch
from bad_arguments import warp_env_arguments
from gymnasium.envs.classic_control.pendulum import PendulumEnv as GymPendulum
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from torchrl_ext.envs import PendulumEnv


def _set_state_and_step(env, states, actions):
    root = env.reset()
    env.state.copy_(torch.as_tensor(states, dtype=env.dtype))
    return env.step(root.set("action", torch.as_tensor(actions, dtype=env.dtype).view(-1, 1)))


def _gym_step(state, action):
    g = GymPendulum()
    g.reset(seed=0)
    g.state = np.array(state, dtype=np.float64)
    _, reward, term, trunc, _ = g.step(np.array([action], dtype=np.float64))
    return g.state.copy(), reward, term, trunc


class TestPendulumEnv:
    """PendulumEnv reproduces gymnasium's Pendulum-v1 to 1e-6 relative.

    Hand-computed steps, step-for-step agreement with gymnasium in float64 over random torque
    sequences (clipping included) and in float32 from shared states, truncation at ``max_steps``
    with ``terminated`` never set, uniform initial states, and NaN torques rejected.
    """

    def test_steps_by_hand(self):
        env = PendulumEnv(2, seed=0, dtype=torch.float64)
        td = _set_state_and_step(env, [[0.0, 0.0], [math.pi / 2, 0.0]], [0.0, 0.0])
        obs = td["next", "observation"]
        assert obs[0].tolist() == [1.0, 0.0, 0.0]
        assert td["next", "reward"][0].item() == 0.0
        th = math.pi / 2 + 0.75 * 0.05
        expected = torch.tensor([math.cos(th), math.sin(th), 0.75], dtype=torch.float64)
        torch.testing.assert_close(obs[1], expected, rtol=1e-14, atol=1e-15)
        assert td["next", "reward"][1].item() == pytest.approx(-((math.pi / 2) ** 2), rel=1e-14)

    def test_torque_is_clipped_as_documented(self):
        env = PendulumEnv(4, seed=0, dtype=torch.float64)
        states = [[0.3, -0.2]] * 4
        clipped = _set_state_and_step(env, states, [5.0, -math.inf, 2.0, -2.0])
        obs, reward = clipped["next", "observation"], clipped["next", "reward"]
        assert torch.equal(obs[0], obs[2]) and torch.equal(obs[1], obs[3])
        assert torch.equal(reward[0], reward[2]) and torch.equal(reward[1], reward[3])

    @pytest.mark.parametrize("seed", [0, 7])
    def test_float64_trajectories_match_gymnasium(self, seed):
        n, steps = 8, 250
        env = PendulumEnv(n, seed=seed, dtype=torch.float64, max_steps=None)
        root = env.reset()
        gyms = []
        for i in range(n):
            g = GymPendulum()
            g.reset(seed=0)
            g.state = env.state[i].numpy().copy()
            gyms.append(g)
        gen = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            action = torch.rand(n, 1, generator=gen, dtype=torch.float64) * 6 - 3
            root["action"] = action
            td, root = env.step_and_maybe_reset(root)
            for i, g in enumerate(gyms):
                _, reward, term, _, _ = g.step(action[i].numpy())
                th, thdot = g.state
                expected = np.array([np.cos(th), np.sin(th), thdot])
                np.testing.assert_allclose(
                    td["next", "observation"][i].numpy(), expected, rtol=1e-6, atol=1e-9
                )
                np.testing.assert_allclose(td["next", "reward"][i].item(), reward, rtol=1e-6)
                assert not term and not bool(td["next", "terminated"][i])

    def test_float32_steps_match_gymnasium_from_shared_states(self):
        n = 512
        gen = torch.Generator().manual_seed(3)
        states = torch.stack(
            [torch.rand(n, generator=gen) * 8 - 4, torch.rand(n, generator=gen) * 16 - 8], dim=1
        )
        actions = torch.rand(n, generator=gen) * 5 - 2.5
        env = PendulumEnv(n, seed=0)
        td = _set_state_and_step(env, states, actions)
        for i in range(n):
            state, reward, _, _ = _gym_step(states[i].double().numpy(), float(actions[i]))
            expected = np.array([np.cos(state[0]), np.sin(state[0]), state[1]])
            np.testing.assert_allclose(
                td["next", "observation"][i].double().numpy(), expected, rtol=1e-6, atol=1e-6
            )
            np.testing.assert_allclose(td["next", "reward"][i].item(), reward, rtol=1e-6, atol=1e-6)

    def test_truncates_at_max_steps_and_never_terminates(self):
        env = PendulumEnv(4, seed=2)
        data = env.rollout(450, break_when_any_done=False)
        trunc = data["next", "truncated"][..., 0]
        assert not bool(data["next", "terminated"].any())
        expected = torch.zeros(450, dtype=torch.bool)
        expected[199] = expected[399] = True
        assert all(torch.equal(row, expected) for row in trunc)
        assert torch.equal(data["next", "done"], data["next", "truncated"])

    def test_initial_states_uniform(self):
        env = PendulumEnv(4096, seed=5)
        env.reset()
        th, thdot = env.state[:, 0].double().numpy(), env.state[:, 1].double().numpy()
        assert stats.kstest(th, stats.uniform(loc=-math.pi, scale=2 * math.pi).cdf).pvalue > 0.01
        assert stats.kstest(thdot, stats.uniform(loc=-1.0, scale=2.0).cdf).pvalue > 0.01

    def test_bad_actions_raise_and_step_nothing(self):
        env = PendulumEnv(3, seed=0)
        root = env.reset()
        before = env.state.clone()
        nan = torch.tensor([[0.0], [math.nan], [1.0]])
        with pytest.raises(ValueError, match=r"action\[\(1, 0\)\]=nan"):
            env.step(root.clone().set("action", nan))
        with pytest.raises(ValueError, match="NaN"):
            env.step_and_maybe_reset(root.clone().set("action", nan))
        with pytest.raises(TypeError, match=r"action\.dtype=torch\.float64"):
            env.step(root.clone().set("action", torch.zeros(3, 1, dtype=torch.float64)))
        with pytest.raises(ValueError, match=r"action.shape=\(3, 2\)"):
            env.step(root.clone().set("action", torch.zeros(3, 2)))
        assert torch.equal(env.state, before)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_constructor_refuses_random_bad_arguments(data):
    """One random bad argument at a time raises TypeError or ValueError (never anything else)."""
    bad = {**warp_env_arguments()}
    name = data.draw(st.sampled_from(sorted(bad)))
    kwargs = {"num_envs": 2, "seed": 0, name: data.draw(bad[name])}
    with pytest.raises((TypeError, ValueError), match=name):
        PendulumEnv(**kwargs)
