"""What every POPGym port's ``load_state_dict`` accepts: every state a run reaches.

Each port refuses loaded states that break its invariants (the per-port tests edit one entry of
a real state to break one); this file checks the other side, over every port and difficulty:
states saved at random points of long random runs all load back. The runs mix what a user may
do: steps before the first reset, plain steps past an episode's end (no reset), resets of
random envs, a reseed mid-run.
"""

from __future__ import annotations

import pytest
import torch
from popgym_helpers import DIFFICULTIES
from tensordict import TensorDict

from torchrl_ext.envs import popgym

PORTS = sorted(name for name in popgym.__all__ if name.endswith("Env"))


def _steps_per_episode(env) -> int:
    return env.max_steps


class TestReachedStatesLoad:
    """A state saved anywhere in a run loads into a fresh env, which then holds it exactly."""

    @pytest.mark.parametrize("name", PORTS)
    def test_the_state_of_an_env_never_reset_loads(self, name):
        env = getattr(popgym, name)(2, seed=0)
        env.load_state_dict(env.state_dict())  # as built: zeros
        env.step(env.rand_action())
        env.load_state_dict(env.state_dict())  # stepped from the zeros

    @pytest.mark.parametrize("difficulty", DIFFICULTIES)
    @pytest.mark.parametrize("name", PORTS)
    def test_states_saved_at_random_points_load_back(self, name, difficulty, device):
        cls, n = getattr(popgym, name), 4
        env = cls(n, device, seed=5, difficulty=difficulty)
        fresh = cls(n, device, seed=9, difficulty=difficulty)
        gen = torch.Generator().manual_seed(sum(map(ord, name + difficulty)))
        loads = 0

        def save_and_load() -> None:
            nonlocal loads
            saved = env.state_dict()
            fresh.load_state_dict(saved)
            after = fresh.state_dict()
            assert all(torch.equal(saved[k], after[k]) for k in saved)
            loads += 1

        def step() -> None:
            env.step(env.rand_action(TensorDict({}, [n], device=env.device)))

        for _ in range(3):  # before the first reset
            step()
            save_and_load()
        env.reset()
        save_and_load()
        length = min(_steps_per_episode(env), 300) + 30
        for t in range(length):
            step()
            state = env.state_dict()
            done = state["done"].view(-1).cpu()
            at_limit = state["steps"].cpu() >= env._limit  # a plain step would pass it
            chance = torch.rand(n, generator=gen)
            mask = at_limit | (done & (chance < 0.5)) | (chance > 0.98)
            if mask.any():
                env.reset(TensorDict({"_reset": mask.view(n, 1)}, [n], device=env.device))
            if t == length // 2:
                env.set_seed(7)  # episode counters restart mid-episode
            if t % 4 == int(torch.randint(0, 4, (), generator=gen)):  # a quarter, at random
                save_and_load()
        assert loads >= 5


def test_configure_must_return_max_steps():
    class Unbounded(popgym.RepeatPreviousEnv):
        def _configure(self, preset):
            super()._configure(preset)

    with pytest.raises(TypeError, match=r"Unbounded._configure\(\) must return max_steps.*None"):
        Unbounded(1, seed=0)
