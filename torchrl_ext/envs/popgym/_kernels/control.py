"""Warp functions of POPGym's control tasks: cart-poles and pendulums seen partially or noisily.

The physics is gymnasium's, reused from :mod:`torchrl_ext.envs._kernels.cartpole` and
:mod:`torchrl_ext.envs._kernels.pendulum`; this module adds what POPGym changes: the rewards
scaled to a return of at most 1, the observations restricted to positions or velocities, and
Gaussian observation noise.

Noise is a pure function of the observation's random stream (``observe``'s ``key``, one per
step of an episode): draws 0 and 1 of it, so observing the same state twice gives the same noisy
observation.
"""

from __future__ import annotations

from typing import Any

import warp as wp

from torchrl_ext.envs._kernels import cartpole as _cartpole
from torchrl_ext.envs._kernels import pendulum as _pendulum
from torchrl_ext.envs._kernels.common import gaussian_pair


@wp.func
def _noisy(value: Any, sigma: Any, z: Any, bound: Any):
    """``value + sigma * z`` clipped to ``[-bound, bound]`` (all four of one float dtype)."""
    return wp.clamp(value + sigma * z, -bound, bound)


# ------------------------------------------------------------------ cart-pole
@wp.func
def cartpole_advance(s: Any, p: Any, a: Any, i: int, step: int, key: wp.uint32):
    """Gymnasium's cart-pole step; the reward is ``1 / max_steps`` on every step."""
    _one, fell = _cartpole.advance(s, p, a, i, step, key)
    return p.reward_scale, fell


@wp.func
def observe_positions(s: Any, p: Any, o: Any, i: int, step: int, key: wp.uint32):
    """``(x, theta)``."""
    o.observation[i, 0] = s.state[i, 0]
    o.observation[i, 1] = s.state[i, 2]


@wp.func
def observe_velocities(s: Any, p: Any, o: Any, i: int, step: int, key: wp.uint32):
    """``(x_dot, theta_dot)``; at step 0 ``(x, theta)``, as POPGym's reset returns."""
    shift = 1
    if step == 0:
        shift = 0
    o.observation[i, 0] = s.state[i, shift]
    o.observation[i, 1] = s.state[i, 2 + shift]


@wp.func
def observe_noisy_positions(s: Any, p: Any, o: Any, i: int, step: int, key: wp.uint32):
    """``(x, theta)`` plus ``N(0, noise_sigma^2)`` noise, clipped to the observation bounds."""
    z0, z1 = gaussian_pair(key, 0)
    o.observation[i, 0] = _noisy(s.state[i, 0], p.noise_sigma, s.state.dtype(z0), p.x_bound)
    o.observation[i, 1] = _noisy(s.state[i, 2], p.noise_sigma, s.state.dtype(z1), p.theta_bound)


# ------------------------------------------------------------------ pendulum
@wp.func
def pendulum_advance(s: Any, p: Any, a: Any, i: int, step: int, key: wp.uint32):
    """Gymnasium's pendulum step; the reward ``-cost`` mapped to ``[-1, 1] / max_steps``."""
    reward, ended = _pendulum.advance(s, p, a, i, step, key)
    return ((reward + p.half_cost_range) / p.half_cost_range) / p.max_steps, ended


@wp.func
def observe_angle(s: Any, p: Any, o: Any, i: int, step: int, key: wp.uint32):
    """``(cos theta, sin theta)``."""
    o.observation[i, 0] = wp.cos(s.state[i, 0])
    o.observation[i, 1] = wp.sin(s.state[i, 0])


@wp.func
def observe_noisy_angle(s: Any, p: Any, o: Any, i: int, step: int, key: wp.uint32):
    """``(cos theta, sin theta)`` plus ``N(0, noise_sigma^2)`` noise, clipped to ``[-1, 1]``."""
    z0, z1 = gaussian_pair(key, 0)
    theta = s.state[i, 0]
    o.observation[i, 0] = _noisy(wp.cos(theta), p.noise_sigma, s.state.dtype(z0), p.obs_bound)
    o.observation[i, 1] = _noisy(wp.sin(theta), p.noise_sigma, s.state.dtype(z1), p.obs_bound)
