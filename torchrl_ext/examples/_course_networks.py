"""The course pipeline's networks: MLPs for actor and critic, and their input's scale.

:func:`observation_scale` brings CourseEnv's observation to order 1, :class:`GaussianHead` is
the actor's Gaussian over ``(steer, throttle)``, :func:`mlp` the network both are built from.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from torchrl_ext.envs import CarConfig
from torchrl_ext.envs.course import CourseParams


def observation_scale(num_rays: int, car: CarConfig, params: CourseParams) -> torch.Tensor:
    """Factors that bring the observation to order 1.

    Range readings and speed are divided by their maxima, the checkpoint distance by the
    checkpoint spacing; the heading error (radians) is kept.

    Examples:
        >>> from torchrl_ext.envs import CarConfig
        >>> from torchrl_ext.envs.course import CourseParams
        >>> observation_scale(2, CarConfig(), CourseParams()).tolist()
        [0.20000000298023224, 0.20000000298023224, 0.20000000298023224, 1.0, 0.20000000298023224]
    """
    rays = [1.0 / car.max_range] * num_rays
    return torch.tensor([*rays, 1.0 / car.max_speed, 1.0, 1.0 / params.checkpoint_spacing])


class GaussianHead(nn.Module):
    """An MLP mean with a learned, state-independent log standard deviation.

    Args:
        obs_dim (int): observation size.
        act_dim (int): action size.
        hidden (int): width of the two hidden layers.
        init_scale (float): initial standard deviation.
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden: int, init_scale: float) -> None:
        super().__init__()
        self.mean = mlp(obs_dim, act_dim, hidden)
        self.log_std = nn.Parameter(torch.full((act_dim,), math.log(init_scale)))
        with torch.no_grad():
            self.mean[-1].weight.mul_(0.01)
            self.mean[-1].bias.zero_()

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns ``(loc, scale)`` of the action distribution."""
        loc = self.mean(observation)
        return loc, self.log_std.exp().expand_as(loc)


def mlp(in_features: int, out_features: int, hidden: int) -> nn.Sequential:
    """Two tanh hidden layers of width ``hidden``, then a linear output."""
    return nn.Sequential(
        nn.Linear(in_features, hidden),
        nn.Tanh(),
        nn.Linear(hidden, hidden),
        nn.Tanh(),
        nn.Linear(hidden, out_features),
    )
