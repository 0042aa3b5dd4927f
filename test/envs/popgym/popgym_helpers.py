"""Helpers shared by the POPGym port tests: lock-step parity with POPGym and contract checks."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np
import pytest
import torch
from tensordict import TensorDict

DIFFICULTIES = ("easy", "medium", "hard")


class FixedShuffle:
    """A stand-in for POPGym's ``np_random`` whose shuffles write the given permutations."""

    def __init__(self, rng: np.random.Generator, perms: Iterable[np.ndarray]) -> None:
        self._rng, self._perms = rng, list(perms)

    def shuffle(self, x: np.ndarray) -> None:
        x[:] = self._perms.pop(0)

    def __getattr__(self, name: str):
        return getattr(self._rng, name)


# ------------------------------------------------------------------------- lock-step harness
#: ``fresh(env, genv, rng) -> (hidden, obs)``: a new episode's hidden state for POPGym's
#: ``genv`` (drawn or injected) and POPGym's reset observation; ``hidden`` maps state names of
#: ours to the values of one env.
Fresh = Callable[[object, object, np.random.Generator], tuple[dict, object]]


def begin(env, gyms, mask: torch.Tensor, rng: np.random.Generator, fresh: Fresh) -> None:
    """Reset the ``mask``ed envs of both with the same fresh hidden state; check reset obs."""
    n = env.num_envs
    env.reset(TensorDict({"_reset": mask.reshape(n, 1)}, [n]))
    state, expected = env.state_dict(), {}
    for k in mask.nonzero().flatten().tolist():
        hidden, expected[k] = fresh(env, gyms[k], rng)
        for name, value in hidden.items():
            state[name][k] = torch.as_tensor(value)
    env.load_state_dict(state)
    env.reset(TensorDict({"_reset": torch.zeros(n, 1, dtype=torch.bool)}, [n]))  # observe only
    root = env.state_dict()["root.observation"]
    for k, obs in expected.items():
        np.testing.assert_array_equal(root[k].numpy(), np.asarray(obs))


def lockstep(env, gyms, act, steps: int, rng: np.random.Generator, fresh: Fresh) -> tuple:
    """Step ``env`` and the POPGym ``gyms`` with the same actions (``act(genv, rng)``).

    Observations, rewards and both flags must agree on every step.

    Returns:
        The numbers of terminations and of truncations seen.
    """
    n = env.num_envs
    env.reset()
    begin(env, gyms, torch.ones(n, dtype=torch.bool), rng, fresh)
    ends = np.zeros(2, dtype=int)
    for _ in range(steps):
        actions = [act(g, rng) for g in gyms]
        td = TensorDict({"action": torch.as_tensor(np.array(actions), dtype=torch.int64)}, [n])
        nxt = env.step(td)["next"]
        for k, genv in enumerate(gyms):
            obs, reward, terminated, truncated, _ = genv.step(actions[k])
            np.testing.assert_array_equal(nxt["observation"][k].numpy(), np.asarray(obs))
            assert nxt["reward"][k, 0].item() == reward
            assert bool(nxt["terminated"][k]) == terminated
            assert bool(nxt["truncated"][k]) == truncated
        ends += [int(nxt["terminated"].sum()), int(nxt["truncated"].sum())]
        done = nxt["done"].reshape(n)
        if done.any():
            begin(env, gyms, done, rng, fresh)
    return tuple(ends)


def play_one(env, genv, actions: Sequence) -> list[tuple[bool, bool]]:
    """Step env 0 of ``env`` and POPGym's ``genv`` (both mid-episode) with ``actions``.

    Rewards and flags must agree on every step.

    Returns:
        Our ``(terminated, truncated)`` of each step.
    """
    flags = []
    for action in actions:
        td = TensorDict({"action": torch.as_tensor(np.asarray(action)).unsqueeze(0)}, [1])
        nxt = env.step(td)["next"]
        _, reward, terminated, truncated, _ = genv.step(action)
        flags.append((bool(nxt["terminated"][0]), bool(nxt["truncated"][0])))
        assert nxt["reward"][0, 0].item() == reward
        assert flags[-1] == (terminated, truncated)
    return flags


# ------------------------------------------------------------------------------ contract
def run(env, root, actions) -> list[torch.Tensor]:
    """Fused steps under ``actions``; each step's next observation, reward and done."""
    out = []
    for action in actions:
        root["action"] = action.to(env.device)
        td, root = env.step_and_maybe_reset(root)
        out += [td["next", "observation"], td["next", "reward"], td["next", "done"]]
    return out


def assert_capture_equals_eager(cls, device, actions: torch.Tensor) -> None:
    """Captured and eager ``cls`` (4 envs, hard) agree bitwise under ``actions``."""
    envs = [cls(4, device, seed=2, difficulty="hard", capture=c) for c in (False, True)]
    runs = [run(env, env.reset(), actions) for env in envs]
    assert all(torch.equal(a, b) for a, b in zip(*runs, strict=True))


def assert_round_trip(cls, device, actions: torch.Tensor, split: int = 40) -> None:
    """A state saved after ``split`` steps, loaded into a fresh env, continues bitwise."""
    env = cls(4, device, seed=3)
    root = env.reset()
    run(env, root, actions[:split])
    saved, root_copy = env.state_dict(), root.clone()
    expected = run(env, root, actions[split:])
    fresh = cls(4, device, seed=99)
    fresh.load_state_dict(saved)
    got = run(fresh, root_copy, actions[split:])
    assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))


def assert_bad_state_refused(env, corruptions: Iterable[tuple[str, Callable]]) -> None:
    """Each ``(name, corrupt)`` applied to a saved state is refused, naming ``name``, and the
    env's state is left as it was."""
    before = env.state_dict()
    for name, corrupt in corruptions:
        state = env.state_dict()
        corrupt(state)
        with pytest.raises(ValueError, match=name):
            env.load_state_dict(state)
        after = env.state_dict()
        assert all(torch.equal(before[k], after[k]) for k in before)


def assert_bad_actions_refused(env, root, bads: Iterable[torch.Tensor]) -> None:
    """Each action in ``bads`` is refused by ``step``, and the env's state is left as it was."""
    before = env.state_dict()
    for bad in bads:
        root["action"] = bad
        with pytest.raises(ValueError, match="action"):
            env.step(root)
    after = env.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
