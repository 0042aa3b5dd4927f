import math

import numpy as np
import pytest
import torch
from bad_arguments import not_bools, warp_env_arguments
from gymnasium.envs.classic_control.cartpole import CartPoleEnv as GymCartPole
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from torchrl_ext.envs import CartPoleEnv


def _gym_envs(states):
    envs = []
    for s in states:
        g = GymCartPole()
        g.reset(seed=0)
        g.state = np.array(s, dtype=np.float64)
        envs.append(g)
    return envs


class TestCartPoleEnv:
    """CartPoleEnv reproduces gymnasium's CartPole-v1.

    float64: every observation equals gymnasium's state bit for bit given the same start and
    actions; float32: termination steps agree; the time limit sets ``truncated`` only; the
    partially observable mode shows ``(x, theta)``; bad actions raise before anything is stepped.
    """

    def test_one_step_from_rest_by_hand(self):
        env = CartPoleEnv(1, seed=0, dtype=torch.float64)
        root = env.reset()
        env.state.zero_()
        td = env.step(root.set("action", torch.ones(1, dtype=torch.int64)))
        temp = (10.0 + 0.05 * 0.0 * 0.0) / 1.1
        thetaacc = (9.8 * 0.0 - 1.0 * temp) / (0.5 * (4.0 / 3.0 - 0.1 * 1.0 / 1.1))
        xacc = temp - 0.05 * thetaacc * 1.0 / 1.1
        expected = torch.tensor([[0.0, 0.02 * xacc, 0.0, 0.02 * thetaacc]], dtype=torch.float64)
        assert torch.equal(td["next", "observation"], expected)
        assert td["next", "reward"].item() == 1.0
        assert not td["next", "done"].item()

    def test_terminates_past_the_angle_limit_by_hand(self):
        env = CartPoleEnv(2, seed=0, dtype=torch.float64)
        root = env.reset()
        limit = 12 * 2 * math.pi / 360
        # theta moves by tau * theta_dot = 0.02 * 1.0 in one step
        env.state.copy_(torch.tensor([[0.0, 0.0, limit - 0.01, 1.0], [0.0, 0.0, 0.0, 0.0]]))
        td = env.step(root.set("action", torch.zeros(2, dtype=torch.int64)))
        assert td["next", "terminated"][:, 0].tolist() == [True, False]
        assert td["next", "truncated"][:, 0].tolist() == [False, False]

    @pytest.mark.parametrize("seed", [0, 1, 2])
    def test_float64_bitwise_equal_to_gymnasium(self, seed):
        n, steps = 16, 300
        env = CartPoleEnv(n, seed=seed, dtype=torch.float64, max_steps=None)
        root = env.reset()
        gyms = _gym_envs(root["observation"].numpy())
        gen = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            action = torch.randint(0, 2, (n,), generator=gen)
            root["action"] = action
            td, root = env.step_and_maybe_reset(root)
            ours = td["next", "observation"].numpy()
            for i, g in enumerate(gyms):
                obs, _, term, _, _ = g.step(int(action[i]))
                assert ours[i].tobytes() == g.state.tobytes()
                assert np.array_equal(obs, ours[i].astype(np.float32))
                assert term == bool(td["next", "terminated"][i])
                if term:
                    g.state = root["observation"][i].numpy().copy()
                    g.steps_beyond_terminated = None

    def test_float32_termination_steps_agree_with_gymnasium(self):
        n, steps = 64, 400
        env = CartPoleEnv(n, seed=11, max_steps=None)
        root = env.reset()
        gyms = _gym_envs(root["observation"].double().numpy())
        gen = torch.Generator().manual_seed(5)
        lengths_ours, lengths_gym = [], []
        ours_len = np.zeros(n, dtype=int)
        gym_len = np.zeros(n, dtype=int)
        for _ in range(steps):
            action = torch.randint(0, 2, (n,), generator=gen)
            root["action"] = action
            td, root = env.step_and_maybe_reset(root)
            ours_len += 1
            gym_len += 1
            for i, g in enumerate(gyms):
                _, _, term, _, _ = g.step(int(action[i]))
                if term:
                    lengths_gym.append((i, gym_len[i]))
                    gym_len[i] = 0
                    g.state = root["observation"][i].double().numpy().copy()
                    g.steps_beyond_terminated = None
                if td["next", "terminated"][i]:
                    lengths_ours.append((i, ours_len[i]))
                    ours_len[i] = 0
        assert len(lengths_ours) > 500
        assert lengths_ours == lengths_gym

    def test_truncation_sets_truncated_not_terminated(self):
        env = CartPoleEnv(32, seed=3, max_steps=7)
        data = env.rollout(50, break_when_any_done=False)
        term = data["next", "terminated"][..., 0]
        trunc = data["next", "truncated"][..., 0]
        done = data["next", "done"][..., 0]
        assert trunc.any()
        assert torch.equal(done, term | trunc)
        for i in range(32):
            length = 0
            for t in range(50):
                length += 1
                assert bool(trunc[i, t]) == (length == 7)
                if done[i, t]:
                    length = 0

    def test_truncation_matches_gymnasium_time_limit(self):
        import gymnasium as gym

        env = CartPoleEnv(1, seed=0, dtype=torch.float64, max_steps=3)
        root = env.reset()
        genv = gym.make("CartPole-v1", max_episode_steps=3)
        genv.reset(seed=0)
        genv.unwrapped.state = root["observation"][0].numpy().copy()
        for t in range(3):
            root["action"] = torch.tensor([t % 2])
            td, root = env.step_and_maybe_reset(root)
            _, _, term, trunc, _ = genv.step(t % 2)
            assert (term, trunc) == (
                bool(td["next", "terminated"]),
                bool(td["next", "truncated"]),
            )
        assert trunc

    def test_partially_observable_mode_shows_positions(self):
        full = CartPoleEnv(8, seed=4)
        part = CartPoleEnv(8, seed=4, observe_velocity=False)
        assert part.observation_spec["observation"].shape == (8, 2)
        rf, rp = full.reset(), part.reset()
        assert torch.equal(rp["observation"], rf["observation"][:, [0, 2]])
        gen = torch.Generator().manual_seed(0)
        for _ in range(40):
            action = torch.randint(0, 2, (8,), generator=gen)
            rf["action"], rp["action"] = action, action
            tf, rf = full.step_and_maybe_reset(rf)
            tp, rp = part.step_and_maybe_reset(rp)
            assert torch.equal(tp["next", "observation"], tf["next", "observation"][:, [0, 2]])
            assert torch.equal(rp["observation"], rf["observation"][:, [0, 2]])
            assert torch.equal(tp["next", "done"], tf["next", "done"])

    def test_reset_states_uniform_in_range(self):
        env = CartPoleEnv(4096, seed=123)
        obs = env.reset()["observation"].double()
        assert bool((obs >= -0.05).all()) and bool((obs < 0.05).all())
        for j in range(4):
            result = stats.kstest(obs[:, j].numpy(), stats.uniform(loc=-0.05, scale=0.1).cdf)
            assert result.pvalue > 0.01
        corr = np.corrcoef(obs.numpy().T)
        assert np.abs(corr - np.eye(4)).max() < 0.1

    def test_rollout_random_actions_are_fair_independent_coin_flips(self):
        # eight flips per random byte: check the marginal, neighbours in time and across envs
        torch.manual_seed(0)
        n, steps = 64, 251  # n * steps is not a multiple of 8
        actions = CartPoleEnv(n, seed=3).rollout(steps, break_when_any_done=False)["action"]
        assert actions.shape == (n, steps) and actions.dtype == torch.int64
        assert actions.is_contiguous()
        assert bool(((actions == 0) | (actions == 1)).all())
        counts = torch.bincount(actions.flatten(), minlength=2).numpy()
        assert stats.chisquare(counts).pvalue > 0.01
        for a, b in ((actions[:, :-1], actions[:, 1:]), (actions[:-1], actions[1:])):
            pairs = torch.bincount((2 * a + b).flatten(), minlength=4).numpy()
            assert stats.chisquare(pairs).pvalue > 0.01

    def test_first_episode_lengths_match_gymnasium_distribution(self):
        # first episodes only: later ones are censored by the end of the window
        n = 1024
        env = CartPoleEnv(n, seed=9)
        with torch.random.fork_rng():  # random actions come from torch's global generator
            torch.manual_seed(9)
            done = env.rollout(300, break_when_any_done=False)["next", "done"][..., 0]
        assert bool(done.any(dim=1).all())
        ours = (done.int().argmax(dim=1) + 1).numpy()
        rng = np.random.default_rng(0)
        theirs = []
        g = GymCartPole()
        for k in range(n):
            g.reset(seed=k)
            length, term = 0, False
            while not term:
                _, _, term, _, _ = g.step(int(rng.integers(2)))
                length += 1
            theirs.append(length)
        assert stats.mannwhitneyu(ours, theirs).pvalue > 0.01
        assert stats.ks_2samp(ours, theirs).pvalue > 0.01

    def test_bad_actions_raise_and_step_nothing(self):
        env = CartPoleEnv(4, seed=0)
        root = env.reset()
        before = env.state.clone()
        cases = [
            (torch.ones(4, 2, dtype=torch.int64), ValueError, r"action.shape=\(4, 2\)"),
            (torch.ones(4, 1, dtype=torch.int64), ValueError, r"action.shape=\(4, 1\)"),
            (torch.ones(4, dtype=torch.float32), TypeError, "action.dtype"),
            (torch.tensor([0, 1, 2, 0]), ValueError, "must be 0 or 1, got an action entry 2"),
            (torch.tensor([0, -1, 1, 0]), ValueError, "must be 0 or 1, got an action entry -1"),
            (None, TypeError, "action must be a torch.Tensor, got action=None"),
        ]
        for action, err, match in cases:
            inp = root.clone().exclude("action")
            if action is not None:
                inp.set("action", action)
            with pytest.raises(err, match=match):
                env.step(inp.clone())
            with pytest.raises(err, match=match):
                env.step_and_maybe_reset(inp.clone())
            assert torch.equal(env.state, before)
        meta = root.clone().clear_device_()  # a device-less input takes TorchRL's generic path
        meta.set("action", torch.ones(4, dtype=torch.int64, device="meta"))
        with pytest.raises(ValueError, match=r"action\.device=meta"):
            env.step_and_maybe_reset(meta)
        with pytest.raises(TypeError, match="action"):
            env._load_actions({"action": [0, 1, 0, 1]})
        with pytest.raises(ValueError, match=r"action.shape=\(3,\)"):
            env._load_actions({"action": torch.ones(3, dtype=torch.int64)})
        with pytest.raises(ValueError, match=r"action\.device=meta"):
            env._load_actions({"action": torch.ones(4, dtype=torch.int64, device="meta")})
        assert torch.equal(env.state, before)

    @pytest.mark.parametrize(
        ("kwargs", "err", "match"),
        [
            ({"num_envs": 0}, ValueError, "num_envs=0"),
            ({"num_envs": 2.5}, TypeError, "num_envs=2.5"),
            ({"num_envs": 2, "dtype": torch.float16}, ValueError, "dtype=torch.float16"),
            ({"num_envs": 2, "max_steps": 0}, ValueError, "max_steps=0"),
            ({"num_envs": 2, "observe_velocity": 1}, TypeError, "observe_velocity=1"),
            ({"num_envs": 2, "seed": -1}, ValueError, "seed=-1"),
            ({"num_envs": 2, "seed": 2**64}, ValueError, "seed=18446744073709551616"),
            ({"num_envs": 2, "seed": 1.5}, TypeError, "seed=1.5"),
            ({"num_envs": 2, "device": "tpu"}, ValueError, "device"),
            ({"num_envs": 2, "capture": "yes"}, TypeError, "capture='yes'"),
        ],
    )
    def test_bad_construction_arguments(self, kwargs, err, match):
        with pytest.raises(err, match=match):
            CartPoleEnv(**kwargs)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_constructor_refuses_random_bad_arguments(data):
    """One random bad argument at a time raises TypeError or ValueError (never anything else)."""
    bad = {**warp_env_arguments(), "observe_velocity": not_bools()}
    name = data.draw(st.sampled_from(sorted(bad)))
    kwargs = {"num_envs": 2, "seed": 0, name: data.draw(bad[name])}
    with pytest.raises((TypeError, ValueError), match=name):
        CartPoleEnv(**kwargs)
