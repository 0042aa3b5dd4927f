"""Shared set-up of the GAE benchmarks: the rollouts and the timed calls of each comparison.

Plain GAE (no value network, env-major ``[N, T]`` input as torchrl collectors produce):
ours vs torchrl's ``GAE`` with its defaults vs an SB3-style numpy loop on time-major arrays.
Recurrent recompute (LSTM critic): ours vs one raw ``torch.nn.LSTM`` pass over ``[N, T + 1]``
vs torchrl's ``GAE(deactivate_vmap=True)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.modules import LSTMModule, set_recurrent_mode
from torchrl.objectives.value import GAE

from torchrl_ext.objectives import RecurrentGAE

OBS_DIM, HIDDEN = 8, 64
GAMMA, LMBDA = 0.99, 0.95
P_TERMINATED, P_TRUNCATED = 0.01, 0.005


# ------------------------------------------------------------------ data
def make_flags(n_envs: int, steps: int, gen: torch.Generator):
    terminated = torch.rand(n_envs, steps, 1, generator=gen) < P_TERMINATED
    truncated = (torch.rand(n_envs, steps, 1, generator=gen) < P_TRUNCATED) & ~terminated
    return terminated, truncated


def plain_rollout(n_envs: int, steps: int, seed: int = 0) -> TensorDict:
    """Env-major rollout with precomputed values, as a collector + critic would leave it."""
    gen = torch.Generator().manual_seed(seed)
    terminated, truncated = make_flags(n_envs, steps, gen)
    shape = (n_envs, steps, 1)
    return TensorDict(
        {
            "state_value": torch.randn(shape, generator=gen),
            "next": {
                "reward": torch.randn(shape, generator=gen),
                "terminated": terminated,
                "truncated": truncated,
                "done": terminated | truncated,
                "state_value": torch.randn(shape, generator=gen),
            },
        },
        batch_size=[n_envs, steps],
    )


@dataclass
class SB3Arrays:
    """SB3's RolloutBuffer layout: float32 numpy arrays ``[T, N]``."""

    rewards: np.ndarray
    values: np.ndarray
    episode_starts: np.ndarray
    last_values: np.ndarray
    dones: np.ndarray


def sb3_arrays(td: TensorDict) -> SB3Arrays:
    time_major = td.transpose(0, 1)
    done = time_major["next", "done"][..., 0].numpy().astype(np.float32)
    starts = np.zeros_like(done)
    starts[1:] = done[:-1]
    return SB3Arrays(
        rewards=time_major["next", "reward"][..., 0].numpy().copy(),
        values=time_major["state_value"][..., 0].numpy().copy(),
        episode_starts=starts,
        last_values=time_major["next", "state_value"][-1, :, 0].numpy().copy(),
        dones=done[-1].copy(),
    )


def sb3_gae(a: SB3Arrays, gamma: float = GAMMA, gae_lambda: float = LMBDA):
    """Mirrors SB3's ``RolloutBuffer.compute_returns_and_advantage`` (numpy, time-major).

    Like SB3 it treats every episode end as terminal; it is timed as the speed anchor only.
    """
    steps = a.rewards.shape[0]
    advantages = np.zeros_like(a.rewards)
    last_gae_lam = 0
    for step in reversed(range(steps)):
        if step == steps - 1:
            next_non_terminal = 1.0 - a.dones
            next_values = a.last_values
        else:
            next_non_terminal = 1.0 - a.episode_starts[step + 1]
            next_values = a.values[step + 1]
        delta = a.rewards[step] + gamma * next_values * next_non_terminal - a.values[step]
        last_gae_lam = delta + gamma * gae_lambda * next_non_terminal * last_gae_lam
        advantages[step] = last_gae_lam
    returns = advantages + a.values
    return advantages, returns


def recurrent_rollout(n_envs: int, steps: int, seed: int = 0) -> TensorDict:
    """Observations consistent with auto-reset; ``is_init`` as ``InitTracker`` writes them."""
    gen = torch.Generator().manual_seed(seed)
    terminated, truncated = make_flags(n_envs, steps, gen)
    done = terminated | truncated
    obs = torch.randn(n_envs, steps, OBS_DIM, generator=gen)
    next_obs = torch.randn(n_envs, steps, OBS_DIM, generator=gen)
    next_obs[:, :-1] = torch.where(done[:, :-1], next_obs[:, :-1], obs[:, 1:])
    is_init = torch.zeros_like(done)
    is_init[:, 0] = True
    is_init[:, 1:] = done[:, :-1]
    return TensorDict(
        {
            "observation": obs,
            "is_init": is_init,
            "next": {
                "observation": next_obs,
                "is_init": torch.zeros_like(done),
                "reward": torch.randn(n_envs, steps, 1, generator=gen),
                "terminated": terminated,
                "truncated": truncated,
                "done": done,
            },
        },
        batch_size=[n_envs, steps],
    )


def lstm_critic(seed: int = 0) -> TensorDictSequential:
    torch.manual_seed(seed)
    lstm = LSTMModule(
        input_size=OBS_DIM,
        hidden_size=HIDDEN,
        in_keys=["observation", "rs_h", "rs_c"],
        out_keys=["embed", ("next", "rs_h"), ("next", "rs_c")],
    )
    head = TensorDictModule(nn.Linear(HIDDEN, 1), in_keys=["embed"], out_keys=["state_value"])
    return TensorDictSequential(lstm, head)


# ------------------------------------------------------------------ the timed calls
def plain_cases(n_envs: int, steps: int) -> dict:
    """Zero-argument callables for the plain-GAE comparison, on the same data."""
    td = plain_rollout(n_envs, steps)
    ours = RecurrentGAE(gamma=GAMMA, lmbda=LMBDA)
    theirs = GAE(gamma=GAMMA, lmbda=LMBDA, value_network=None)
    arrays = sb3_arrays(td)
    return {
        "ours": lambda: ours(td.copy()),
        "torchrl_gae": lambda: theirs(td.copy()),
        "sb3_numpy_time_major": lambda: sb3_gae(arrays),
    }


def recurrent_cases(n_envs: int, steps: int) -> dict:
    """Zero-argument callables for the recurrent-recompute comparison, on the same data."""
    td = recurrent_rollout(n_envs, steps)
    critic = lstm_critic()
    ours = RecurrentGAE(gamma=GAMMA, lmbda=LMBDA, value_network=critic)
    theirs = GAE(gamma=GAMMA, lmbda=LMBDA, value_network=critic, deactivate_vmap=True)
    raw = critic.module[0].lstm
    x = torch.randn(n_envs, steps + 1, OBS_DIM, generator=torch.Generator().manual_seed(1))

    @torch.no_grad()
    def raw_pass():
        return raw(x)

    @torch.no_grad()
    def torchrl_pass():
        with set_recurrent_mode(True):
            return theirs(td.copy())

    return {
        "ours": lambda: ours(td.copy()),
        "raw_nn_lstm_T_plus_1": raw_pass,
        "torchrl_gae_deactivate_vmap": torchrl_pass,
    }
