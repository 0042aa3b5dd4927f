"""Our Warp CartPole as a plain batched torch env: tensors in, tensors out, auto-reset.

The PPO demo steps :class:`~torchrl_ext.envs.CartPoleEnv` through a torchrl collector and
transforms; the baselines step the very same env object here, through
``step_and_maybe_reset``, with the demo's constant observation and reward factors applied on
the way out. Episode returns are tracked unscaled (CartPole's units), as the demo's
``RewardSum`` does before its ``RewardScaling``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from torchrl_ext.envs import CartPoleEnv


@dataclass
class Step:
    """What one batched step returns (all tensors have the env count as first dim).

    ``obs`` is the observation to act on next: the reset observation where an episode ended.
    ``final_obs`` is the last observation of the episode that ended (meaningful where ``done``),
    what a truncated episode bootstraps from. ``ended_returns`` are the unscaled returns of the
    episodes that ended at this step, in env order.
    """

    obs: torch.Tensor
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    done: torch.Tensor
    final_obs: torch.Tensor
    ended_returns: torch.Tensor
    ended_lengths: torch.Tensor


class BatchedCartPole:
    """``CartPoleEnv(num_envs, seed, observe_velocity=False)`` with scaled outputs and auto-reset.

    Args:
        num_envs (int): parallel envs.
        seed (int): the env's seed (the demo seeds its env with the run's seed).
        obs_scale (tuple of float): factors on ``(x, theta)``, as the demo's ``ObservationNorm``.
        reward_scale (float): factor on the reward the learner sees.

    Examples:
        >>> env = BatchedCartPole(4, seed=0, obs_scale=(2.0, 20.0), reward_scale=0.1)
        >>> obs = env.reset()
        >>> step = env.step(torch.ones(4, dtype=torch.int64))
        >>> obs.shape, step.reward.tolist(), step.done.dtype
        (torch.Size([4, 2]), [0.1, 0.1, 0.1, 0.1], torch.bool)
    """

    obs_dim = 2
    num_actions = 2

    def __init__(
        self, num_envs: int, seed: int, obs_scale: tuple[float, float], reward_scale: float
    ) -> None:
        self.num_envs = num_envs
        self.env = CartPoleEnv(num_envs, seed=seed, observe_velocity=False)
        self.obs_scale = torch.tensor(obs_scale, dtype=torch.float32)
        self.reward_scale = reward_scale
        self._root = None
        self._returns = torch.zeros(num_envs)
        self._lengths = torch.zeros(num_envs, dtype=torch.int64)

    def reset(self) -> torch.Tensor:
        """Starts every env anew; returns the scaled first observations ``[num_envs, 2]``."""
        self._root = self.env.reset()
        self._returns.zero_()
        self._lengths.zero_()
        return self._root["observation"] * self.obs_scale

    def step(self, action: torch.Tensor) -> Step:
        """Steps every env with ``action`` (int64 ``[num_envs]``); ended episodes restart."""
        self._root.set("action", action)
        td, self._root = self.env.step_and_maybe_reset(self._root)
        nxt = td["next"]
        reward = nxt["reward"].squeeze(-1)
        terminated = nxt["terminated"].squeeze(-1)
        truncated = nxt["truncated"].squeeze(-1)
        done = terminated | truncated
        self._returns += reward
        self._lengths += 1
        ended_returns, ended_lengths = self._returns[done], self._lengths[done]
        self._returns[done] = 0.0
        self._lengths[done] = 0
        return Step(
            obs=self._root["observation"] * self.obs_scale,
            reward=reward * self.reward_scale,
            terminated=terminated,
            truncated=truncated,
            done=done,
            final_obs=nxt["observation"] * self.obs_scale,
            ended_returns=ended_returns,
            ended_lengths=ended_lengths,
        )
