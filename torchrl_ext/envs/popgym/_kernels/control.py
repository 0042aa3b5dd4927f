"""Warp functions of POPGym's control tasks: cart-poles and pendulums seen partially or noisily.

The physics is gymnasium's, reused from :mod:`torchrl_ext.envs._kernels.cartpole` and
:mod:`torchrl_ext.envs._kernels.pendulum`; this module adds what POPGym changes: the rewards
scaled to a return of at most 1, the observations restricted to positions or velocities, and
Gaussian observation noise.

Noise is a pure function of the episode's random stream and the step: the observation at step
``k`` uses the draws ``p.noise_draw + 2 k`` and ``p.noise_draw + 2 k + 1`` (past the draws of the
start state), so observing the same state twice gives the same noisy observation. The stream's
key is kept in the state (``noise_key``) because ``observe`` receives no key.
"""

from __future__ import annotations

from typing import Any

import warp as wp

from torchrl_ext.envs._kernels import cartpole as _cartpole
from torchrl_ext.envs._kernels import pendulum as _pendulum
from torchrl_ext.envs._kernels.common import uniform64

_TWO_PI = wp.constant(wp.float64(6.283185307179586))


@wp.func
def gaussian_pair(key: wp.uint32, draw: int):
    """Two independent standard normal doubles from draws ``draw`` and ``draw + 1`` (Box-Muller)."""
    u1 = wp.float64(1.0) - uniform64(key, draw)  # in (0, 1]: the log is finite
    u2 = uniform64(key, draw + 1)
    radius = wp.sqrt(wp.float64(-2.0) * wp.log(u1))
    angle = _TWO_PI * u2
    return radius * wp.cos(angle), radius * wp.sin(angle)


@wp.func
def _noisy(value: Any, sigma: Any, z: Any, bound: Any):
    """``value + sigma * z`` clipped to ``[-bound, bound]`` (all four of one float dtype)."""
    return wp.clamp(value + sigma * z, -bound, bound)


# ------------------------------------------------------------------ cart-pole
@wp.func
def cartpole_advance(s: Any, p: Any, a: Any, i: int, t: int, step: int):
    """Gymnasium's cart-pole step; the reward is ``1 / episode_length`` on every step."""
    _one, fell = _cartpole.advance(s, p, a, i, t, step)
    return p.reward_scale, fell


@wp.func
def observe_positions(s: Any, p: Any, o: Any, i: int, t: int, step: int):
    """``(x, theta)``."""
    o.observation[i, t, 0] = s.state[i, 0]
    o.observation[i, t, 1] = s.state[i, 2]


@wp.func
def observe_velocities(s: Any, p: Any, o: Any, i: int, t: int, step: int):
    """``(x_dot, theta_dot)``; at step 0 ``(x, theta)``, as POPGym's reset returns."""
    shift = 1
    if step == 0:
        shift = 0
    o.observation[i, t, 0] = s.state[i, shift]
    o.observation[i, t, 1] = s.state[i, 2 + shift]


@wp.func
def noisy_cartpole_start(s: Any, p: Any, i: int, key: wp.uint32):
    """Gymnasium's cart-pole start; keeps the episode's key for the observation noise."""
    _cartpole.start(s, p, i, key)
    s.noise_key[i] = wp.int64(key)


@wp.func
def observe_noisy_positions(s: Any, p: Any, o: Any, i: int, t: int, step: int):
    """``(x, theta)`` plus ``N(0, noise_sigma^2)`` noise, clipped to the observation bounds."""
    z0, z1 = gaussian_pair(wp.uint32(s.noise_key[i]), p.noise_draw + 2 * step)
    o.observation[i, t, 0] = _noisy(s.state[i, 0], p.noise_sigma, s.state.dtype(z0), p.x_bound)
    o.observation[i, t, 1] = _noisy(s.state[i, 2], p.noise_sigma, s.state.dtype(z1), p.theta_bound)


# ------------------------------------------------------------------ pendulum
@wp.func
def pendulum_advance(s: Any, p: Any, a: Any, i: int, t: int, step: int):
    """Gymnasium's pendulum step; the reward ``-cost`` mapped to ``[-1, 1] / episode_length``."""
    reward, ended = _pendulum.advance(s, p, a, i, t, step)
    return ((reward + p.half_cost_range) / p.half_cost_range) / p.episode_length, ended


@wp.func
def observe_angle(s: Any, p: Any, o: Any, i: int, t: int, step: int):
    """``(cos theta, sin theta)``."""
    o.observation[i, t, 0] = wp.cos(s.state[i, 0])
    o.observation[i, t, 1] = wp.sin(s.state[i, 0])


@wp.func
def noisy_pendulum_start(s: Any, p: Any, i: int, key: wp.uint32):
    """Gymnasium's pendulum start; keeps the episode's key for the observation noise."""
    _pendulum.start(s, p, i, key)
    s.noise_key[i] = wp.int64(key)


@wp.func
def observe_noisy_angle(s: Any, p: Any, o: Any, i: int, t: int, step: int):
    """``(cos theta, sin theta)`` plus ``N(0, noise_sigma^2)`` noise, clipped to ``[-1, 1]``."""
    z0, z1 = gaussian_pair(wp.uint32(s.noise_key[i]), p.noise_draw + 2 * step)
    theta = s.state[i, 0]
    o.observation[i, t, 0] = _noisy(wp.cos(theta), p.noise_sigma, s.state.dtype(z0), p.obs_bound)
    o.observation[i, t, 1] = _noisy(wp.sin(theta), p.noise_sigma, s.state.dtype(z1), p.obs_bound)
