"""POPGym's cart-pole and pendulum tasks: parity with popgym, noise and start statistics, contract.

Parity drives each env in lock-step with popgym's own env in float64: both start every episode
from the same state (ours through ``load_state_dict``, popgym through its ``state`` attribute or
its reset draw), take the same actions, and must agree on observations, states, rewards and
flags. The noisy envs run their parity with the noise's sigma set to 0 on both sides; their noise
is tested against ``N(0, sigma^2)`` clipped to popgym's observation bounds.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from popgym.envs import noisy_position_only_cartpole as noisy_cartpole
from popgym.envs import noisy_position_only_pendulum as noisy_pendulum
from popgym.envs import position_only_cartpole as position_cartpole
from popgym.envs import position_only_pendulum as position_pendulum
from popgym.envs import velocity_only_cartpole as velocity_cartpole
from popgym_helpers import DIFFICULTIES
from scipy import stats
from tensordict import TensorDict
from torchrl.envs.utils import check_env_specs

from torchrl_ext.envs.popgym.control import (
    NoisyPositionOnlyCartPoleEnv,
    NoisyPositionOnlyPendulumEnv,
    PositionOnlyCartPoleEnv,
    PositionOnlyPendulumEnv,
    VelocityOnlyCartPoleEnv,
)


class _QuietCartPole(NoisyPositionOnlyCartPoleEnv):
    """The noisy cart-pole with its noise sigma set to 0 (a deterministic observation)."""

    def _noise_constants(self):
        return {**super()._noise_constants(), "noise_sigma": 0.0}


class _QuietPendulum(NoisyPositionOnlyPendulumEnv):
    """The noisy pendulum with its noise sigma set to 0."""

    def _noise_constants(self):
        return {**super()._noise_constants(), "noise_sigma": 0.0}


def _popgym(module, name, difficulty):
    return getattr(module, f"{name}{difficulty.capitalize()}")


#: (our class, the class run in parity, popgym module, popgym class stem, is a cart-pole)
CASES = {
    "position_cartpole": (
        PositionOnlyCartPoleEnv, PositionOnlyCartPoleEnv, position_cartpole,
        "PositionOnlyCartPole", True,
    ),
    "velocity_cartpole": (
        VelocityOnlyCartPoleEnv, VelocityOnlyCartPoleEnv, velocity_cartpole,
        "VelocityOnlyCartPole", True,
    ),
    "noisy_cartpole": (
        NoisyPositionOnlyCartPoleEnv, _QuietCartPole, noisy_cartpole,
        "NoisyPositionOnlyCartPole", True,
    ),
    "position_pendulum": (
        PositionOnlyPendulumEnv, PositionOnlyPendulumEnv, position_pendulum,
        "PositionOnlyPendulum", False,
    ),
    "noisy_pendulum": (
        NoisyPositionOnlyPendulumEnv, _QuietPendulum, noisy_pendulum,
        "NoisyPositionOnlyPendulum", False,
    ),
}  # fmt: skip
ALL = [(name, d) for name in CASES for d in DIFFICULTIES]
NOISY = [(name, d) for name in ("noisy_cartpole", "noisy_pendulum") for d in DIFFICULTIES]


class _StartProxy:
    """``np_random`` stand-in: ``uniform`` returns the start state set in ``start``."""

    def __init__(self, rng):
        self._rng = rng
        self.start = None

    def uniform(self, low=0.0, high=1.0, size=None):
        assert np.all(self.start >= low) and np.all(self.start <= high)
        return self.start.copy()

    def __getattr__(self, name):
        return getattr(self._rng, name)


class _Popgym:
    """One popgym env whose resets start from a given state and whose noise sigma is 0."""

    def __init__(self, module, stem, difficulty):
        self.env = _popgym(module, stem, difficulty)()
        self.env.reset(seed=0)
        self.proxy = _StartProxy(self.env.np_random)
        self.env.np_random = self.proxy
        self.cartpole = hasattr(self.env, "x_threshold")

    def reset(self, start):
        self.proxy.start = np.array(start, dtype=np.float64)
        if hasattr(self.env, "noise_sigma"):
            self.env.noise_sigma = np.zeros(2)
        obs, _ = self.env.reset()
        return obs

    def inject(self, state):
        self.env.state = np.array(state, dtype=np.float64)

    def step(self, action):
        act = int(action) if self.cartpole else np.array([action], dtype=np.float32)
        obs, reward, terminated, truncated, _ = self.env.step(act)
        return obs, reward, terminated, truncated


def _chosen_state(rng, cartpole):
    """A start state wider than the reset box (cart-pole) or anywhere (pendulum)."""
    if cartpole:
        return rng.uniform(-0.15, 0.15, 4)
    return np.array([rng.uniform(-3 * np.pi, 3 * np.pi), rng.uniform(-8.0, 8.0)])


def _actions(rng, states, cartpole, balance):
    """Cart-pole: a balancing push where ``balance``, else a coin flip; pendulum: a torque on a
    1/1024 grid (so popgym's float32 ``3.0 * u`` is exact and its float64 state is ours)."""
    if not cartpole:
        return rng.integers(-2048, 2049, len(states)) / 1024.0
    x, x_dot, theta, theta_dot = states.T
    push = (theta + 0.5 * theta_dot + 0.05 * x + 0.1 * x_dot > 0).astype(np.int64)
    coin = rng.integers(0, 2, len(states))
    return np.where(balance & (rng.random(len(states)) > 0.05), push, coin)


def _as_action(values, cartpole):
    if cartpole:
        return torch.as_tensor(values, dtype=torch.int64)
    return torch.as_tensor(values, dtype=torch.float64).unsqueeze(-1)


def _start_episodes(env, gyms, rows, root, rng):
    """Begin episodes in ``rows``: popgym resets from our start (reset observations compared),
    then every other episode both jump to a chosen state (ours via ``load_state_dict``)."""
    chosen = {}
    for i in rows:
        obs = gyms[i].reset(env.state[i].numpy())
        assert np.array_equal(root["observation"][i].numpy().astype(np.float32), obs), i
        if rng.random() < 0.5:
            chosen[i] = _chosen_state(rng, gyms[i].cartpole)
            gyms[i].inject(chosen[i])
    if chosen:
        saved = env.state_dict()
        for i, state in chosen.items():
            saved["state"][i] = torch.from_numpy(state)
        env.load_state_dict(saved)


@pytest.mark.parametrize(("name", "difficulty"), ALL)
def test_float64_lockstep_parity_with_popgym(name, difficulty):
    _, ours, module, stem, cartpole = CASES[name]
    n, rng = 3, np.random.default_rng(7)
    env = ours(n, seed=3, difficulty=difficulty, dtype=torch.float64)
    steps = env.max_steps + 150 if cartpole else 400  # >= 1,200 steps, a truncation
    gyms = [_Popgym(module, stem, difficulty) for _ in range(n)]
    root = env.reset()
    _start_episodes(env, gyms, range(n), root, rng)
    balance, ends, truncations = np.arange(n) == 0, 0, 0  # env 0 balances its first episode
    for _ in range(steps):
        action = _actions(rng, env.state.numpy(), cartpole, balance)
        root["action"] = _as_action(action, cartpole)
        td, root = env.step_and_maybe_reset(root)
        nxt = td["next"]
        for i in range(n):
            obs, reward, terminated, truncated = gyms[i].step(action[i])
            assert np.array_equal(nxt["observation"][i].numpy().astype(np.float32), obs)
            assert abs(float(nxt["reward"][i, 0]) - reward) <= 1e-12
            assert bool(nxt["terminated"][i, 0]) == terminated
            assert bool(nxt["truncated"][i, 0]) == truncated
            if not (terminated or truncated):
                assert np.array_equal(env.state[i].numpy(), gyms[i].env.state)
        done = nxt["done"][:, 0].nonzero()[:, 0].tolist()
        ends += len(done)
        truncations += int(nxt["truncated"].sum())
        balance[done] = rng.random(len(done)) < 0.3
        _start_episodes(env, gyms, done, root, rng)
    assert ends >= 3 and truncations >= 1, (ends, truncations)


@pytest.mark.parametrize("name", ["position_cartpole", "velocity_cartpole", "noisy_cartpole"])
def test_falling_at_the_limit_is_truncated_too(name):
    """As POPGym: a cart-pole that falls on its last step is terminated and truncated."""
    _, ours, module, stem, _ = CASES[name]
    assert ours.truncates_terminal_steps
    env, gyms = ours(2, seed=0, dtype=torch.float64), [_Popgym(module, stem, "easy") for _ in "ab"]
    root = env.reset()
    for i in range(2):
        gyms[i].reset(env.state[i].numpy())
    states = np.array([[0.0, 0.0, 0.2, 2.0], [0.0, 0.0, 0.0, 0.0]])  # env 0 falls on its step
    saved = env.state_dict()
    saved["state"][:] = torch.from_numpy(states)
    saved["steps"][:] = env.max_steps - 1
    env.load_state_dict(saved)
    root["action"] = torch.ones(2, dtype=torch.int64)
    nxt = env.step(root)["next"]
    for i, expected in enumerate([(True, True), (False, True)]):
        gyms[i].inject(states[i])
        gyms[i].env.num_steps = env.max_steps - 1
        _, reward, terminated, truncated = gyms[i].step(1)
        assert (terminated, truncated) == expected
        assert (bool(nxt["terminated"][i, 0]), bool(nxt["truncated"][i, 0])) == expected
        assert abs(float(nxt["reward"][i, 0]) - reward) <= 1e-12


@pytest.mark.parametrize(("name", "difficulty"), ALL)
def test_presets_match_popgym(name, difficulty):
    cls, _, module, stem, _ = CASES[name]
    theirs = _popgym(module, stem, difficulty)()
    env = cls(1, seed=0, difficulty=difficulty)
    assert env.max_steps == theirs.max_episode_length
    if hasattr(theirs, "noise_sigma"):
        assert env.noise_sigma == theirs.noise_sigma[0]
    else:
        assert env.noise_sigma is None


# ------------------------------------------------------------------ statistics
def _censored_pit(observed, true, sigma, bound, rng):
    """Probability integral transform of ``clip(true + N(0, sigma^2), -bound, bound)``: uniform
    on ``[0, 1]`` exactly when the noise has that law (clipped values spread over their tail)."""
    upper = observed >= bound
    lower = observed <= -bound
    u = stats.norm.cdf((observed - true) / sigma)
    hi_tail = stats.norm.cdf((bound - true) / sigma)
    lo_tail = stats.norm.cdf((-bound - true) / sigma)
    u = np.where(upper, hi_tail + (1 - hi_tail) * rng.random(u.shape), u)
    return np.where(lower, lo_tail * rng.random(u.shape), u)


def _noisy_samples(cls, difficulty, steps=3, n=1500):
    """Observations and the true values under them: the reset one and ``steps`` steps."""
    env = cls(n, seed=11, difficulty=difficulty, dtype=torch.float64)
    cartpole = issubclass(cls, NoisyPositionOnlyCartPoleEnv)
    gen = torch.Generator().manual_seed(5)
    obs = [env.reset()["observation"]]
    true = [_true_obs(env.state, cartpole)]
    for _ in range(steps):
        if cartpole:
            action = torch.randint(0, 2, (n,), generator=gen)
        else:
            action = torch.rand(n, 1, generator=gen, dtype=torch.float64) * 4 - 2
        out = env.step(TensorDict({"action": action}, batch_size=[n]))
        obs.append(out["next", "observation"])
        true.append(_true_obs(env.state, cartpole))
    return torch.stack(obs, 1).numpy(), torch.stack(true, 1).numpy()


def _true_obs(state, cartpole):
    if cartpole:
        return state[:, [0, 2]].clone()
    return torch.stack([state[:, 0].cos(), state[:, 0].sin()], -1)


@pytest.mark.parametrize(("name", "difficulty"), NOISY)
def test_noise_is_gaussian_with_the_preset_sigma_clipped_to_popgym_bounds(name, difficulty):
    cls, _, module, stem, _ = CASES[name]
    bounds = _popgym(module, stem, difficulty)().observation_space.high.astype(np.float64)
    sigma = cls(1, seed=0, difficulty=difficulty).noise_sigma
    obs, true = _noisy_samples(cls, difficulty)
    rng = np.random.default_rng(0)
    for c in range(2):
        assert obs[..., c].max() <= bounds[c] and obs[..., c].min() >= -bounds[c]
        u = _censored_pit(obs[..., c], true[..., c], sigma, bounds[c], rng).ravel()
        assert stats.kstest(u, "uniform").pvalue > 0.01, c
    # a sigma 20% off is refused: the test can fail
    u = _censored_pit(obs[..., 0], true[..., 0], sigma * 1.2, bounds[0], rng).ravel()
    assert stats.kstest(u, "uniform").pvalue < 0.01


@pytest.mark.parametrize("name", ["noisy_cartpole", "noisy_pendulum"])
def test_noise_independent_across_components_steps_and_envs(name):
    cls = CASES[name][0]
    obs, true = _noisy_samples(cls, "easy")
    # The noise's probability integral transform: independent uniforms exactly when the noise is
    # independent, clipped observations included (obs - true is not: clipping ties it to the
    # state, which the pendulum keeps near the bounds).
    bounds = _popgym(CASES[name][2], CASES[name][3], "easy")().observation_space.high.astype(float)
    sigma = cls(1, seed=0).noise_sigma
    rng = np.random.default_rng(0)
    u = np.stack([_censored_pit(obs[..., c], true[..., c], sigma, bounds[c], rng) for c in (0, 1)])
    alpha = 0.01 / 6  # six checks over the two envs (Bonferroni)
    assert stats.pearsonr(u[0].ravel(), u[1].ravel()).pvalue > alpha
    assert stats.pearsonr(u[0, :, :-1].ravel(), u[0, :, 1:].ravel()).pvalue > alpha
    assert stats.pearsonr(u[0, :-1, 0], u[0, 1:, 0]).pvalue > alpha


@pytest.mark.parametrize("name", list(CASES))
def test_start_states_uniform_in_the_reset_box(name):
    cls, cartpole = CASES[name][0], CASES[name][4]
    env = cls(3000, seed=2, dtype=torch.float64)
    boxes = [(-0.05, 0.05)] * 4 if cartpole else [(-np.pi, np.pi), (-1.0, 1.0)]
    for _ in range(2):  # the first and the second episode of every env
        env.reset()
        state = env.state.numpy().copy()
        for c, (low, high) in enumerate(boxes):
            assert state[:, c].min() >= low and state[:, c].max() < high
            assert stats.kstest(state[:, c], stats.uniform(low, high - low).cdf).pvalue > 0.01


# ------------------------------------------------------------------ contract
@pytest.mark.parametrize(("name", "difficulty"), ALL)
def test_check_env_specs(name, difficulty):
    env = CASES[name][0](4, seed=0, difficulty=difficulty)
    check_env_specs(env)
    assert env.observation_spec["observation"].shape == (4, 2)
    assert env.max_steps == type(env).presets[difficulty][0]


def _drive(env, steps, seed):
    """Fused steps under seeded random actions; every output, cloned."""
    gen = torch.Generator().manual_seed(seed)
    root, outs = env.reset(), []
    for _ in range(steps):
        if isinstance(env, PositionOnlyPendulumEnv | NoisyPositionOnlyPendulumEnv):
            action = torch.rand(env.num_envs, 1, generator=gen) * 5 - 2.5  # some clipped
        else:
            action = torch.randint(0, 2, (env.num_envs,), generator=gen)
        root["action"] = action.to(env.dtype) if action.is_floating_point() else action
        td, root = env.step_and_maybe_reset(root)
        outs.append((td["next"].clone(), root.exclude("action").clone()))
    return outs


def _assert_same(a, b):
    for (next_a, root_a), (next_b, root_b) in zip(a, b, strict=True):
        assert (next_a == next_b).all() and (root_a == root_b).all()


@pytest.mark.parametrize("name", list(CASES))
def test_capture_equals_eager_bitwise(name):
    cls = CASES[name][0]
    eager = cls(8, seed=4, difficulty="hard")
    captured = cls(8, seed=4, difficulty="hard", capture=True)
    _assert_same(_drive(eager, 60, 1), _drive(captured, 60, 1))
    torch.manual_seed(0)
    first = eager.rollout(40, break_when_any_done=False)
    torch.manual_seed(0)
    assert (first == captured.rollout(40, break_when_any_done=False)).all()


@pytest.mark.parametrize("name", list(CASES))
def test_state_dict_round_trip_continues_bitwise(name):
    cls = CASES[name][0]
    env = cls(6, seed=8, difficulty="medium", dtype=torch.float64)
    _drive(env, 25, 2)
    saved, copied = env.state_dict(), pickle.loads(pickle.dumps(env))
    gen = torch.Generator().manual_seed(3)
    actions = [
        _as_action(_random(env, gen), not env.action_spec.dtype.is_floating_point)
        for _ in range(40)
    ]
    fresh = cls(6, seed=99, difficulty="medium", dtype=torch.float64)
    fresh.load_state_dict(saved)
    runs = [_continue(e, saved, actions) for e in (env, fresh, copied)]
    _assert_same(runs[0], runs[1])
    _assert_same(runs[0], runs[2])


def _random(env, gen):
    if env.action_spec.dtype.is_floating_point:
        return (torch.rand(env.num_envs, generator=gen, dtype=torch.float64) * 4 - 2).numpy()
    return torch.randint(0, 2, (env.num_envs,), generator=gen).numpy()


def _continue(env, saved, actions):
    """Steps from the saved root (its observation and flags), under the given actions."""
    root = TensorDict(
        {"observation": saved["root.observation"].clone(),
         **{k: torch.zeros_like(saved[k]) for k in ("done", "terminated", "truncated")}},
        batch_size=[env.num_envs],
    )  # fmt: skip
    outs = []
    for action in actions:
        root["action"] = action
        td, root = env.step_and_maybe_reset(root)
        outs.append((td["next"].clone(), root.exclude("action").clone()))
    return outs


@pytest.mark.parametrize("cls", [PositionOnlyCartPoleEnv, VelocityOnlyCartPoleEnv])
def test_a_fallen_cart_pole_not_terminated_is_refused(cls):
    """Unless the last step terminated, a cart-pole is within |x| <= 2.4, |theta| <= 12 deg."""
    env = cls(2, seed=0)
    env.reset()
    before = env.state_dict()
    for column, value in ((0, 2.5), (2, -0.21)):
        saved = {k: v.clone() for k, v in before.items()}
        saved["state"][1, column] = value
        with pytest.raises(ValueError, match=r"'state'\].*unless the last step terminated"):
            env.load_state_dict(saved)
        assert all(torch.equal(before[k], env.state_dict()[k]) for k in before)
        saved["terminated"][1] = True  # where the last step fell
        env.load_state_dict(saved)
        env.load_state_dict(before)


@pytest.mark.parametrize("cls", [PositionOnlyPendulumEnv, NoisyPositionOnlyPendulumEnv])
def test_a_pendulum_faster_than_its_clip_is_refused(cls):
    env = cls(2, seed=0)
    env.reset()
    before, saved = env.state_dict(), env.state_dict()
    saved["state"][0, 1] = -8.01
    with pytest.raises(ValueError, match=r"'state'\].*angular velocities lie in \[-8.0, 8.0\]"):
        env.load_state_dict(saved)
    assert all(torch.equal(before[k], env.state_dict()[k]) for k in before)
    saved["state"][0, 1] = -8.0  # where a step clips it
    env.load_state_dict(saved)


@pytest.mark.parametrize("name", ["noisy_cartpole", "noisy_pendulum"])
def test_noise_comes_from_counters_not_from_the_state(name):
    """The saved state holds only the physics; a loaded copy draws the same noise from then on."""
    cls = CASES[name][0]
    env = cls(4, seed=0, dtype=torch.float64)
    env.reset()
    for _ in range(3):
        env.rand_step()
    saved = env.state_dict()
    assert not any("key" in name for name in saved)
    twin = cls(4, seed=0, dtype=torch.float64)
    twin.load_state_dict(saved)
    torch.manual_seed(3)
    a = env.rollout(30, break_when_any_done=False)
    torch.manual_seed(3)
    b = twin.rollout(30, break_when_any_done=False)
    assert torch.equal(a["next", "observation"], b["next", "observation"])


@pytest.mark.parametrize("cls", [case[0] for case in CASES.values()])
@pytest.mark.parametrize(
    ("kwargs", "err", "match"),
    [
        ({"difficulty": "extreme"}, ValueError, "difficulty='extreme'"),
        ({"difficulty": "Easy"}, ValueError, "difficulty"),
        ({"difficulty": 1}, TypeError, "difficulty=1"),
        ({"num_envs": 0}, ValueError, "num_envs"),
        ({"dtype": torch.int32}, ValueError, "dtype"),
        ({"capture": "yes"}, TypeError, "capture"),
        ({"seed": -1}, ValueError, "seed"),
        ({"device": "tpu"}, ValueError, "device"),
    ],
)
def test_bad_construction_arguments(cls, kwargs, err, match):
    args = {"num_envs": 2, **kwargs}
    with pytest.raises(err, match=match):
        cls(**args)
