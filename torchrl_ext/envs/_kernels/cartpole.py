"""Warp physics of the cart-pole: the three functions the env base builds its kernels from.

The dynamics reproduce gymnasium's ``CartPole-v1`` operation by operation (same constants, same
evaluation order, explicit Euler), so a float64 simulation matches gymnasium bit for bit. The
state of one env is the vector ``(x, x_dot, theta, theta_dot)``.
"""

from __future__ import annotations

from typing import Any

import warp as wp

from torchrl_ext.envs._kernels.common import uniform_range


@wp.func
def _dynamics(s: Any, action: wp.int64, p: Any):
    """One explicit-Euler step pushed by ``action`` (1: ``+force_mag``, 0: ``-force_mag``).

    Returns the new state, the reward 1 and whether the cart left the track or the pole leans
    past the angle limit.
    """
    x, x_dot, theta, theta_dot = s[0], s[1], s[2], s[3]
    force = p.force_mag
    if action == wp.int64(0):
        force = -force
    costheta = wp.cos(theta)
    sintheta = wp.sin(theta)
    temp = (force + p.polemass_length * (theta_dot * theta_dot) * sintheta) / p.total_mass
    denom = p.length * (p.four_thirds - p.masspole * (costheta * costheta) / p.total_mass)
    thetaacc = (p.gravity * sintheta - costheta * temp) / denom
    xacc = temp - p.polemass_length * thetaacc * costheta / p.total_mass
    x = x + p.tau * x_dot
    theta = theta + p.tau * theta_dot
    fell = x < -p.x_limit or x > p.x_limit or theta < -p.theta_limit or theta > p.theta_limit
    new = wp.vector(x, x_dot + p.tau * xacc, theta, theta_dot + p.tau * thetaacc)
    return new, 1.0, fell


@wp.func
def start(s: Any, p: Any, i: int, key: wp.uint32):
    """A new episode: every state component uniform in ``[reset_low, reset_high)``."""
    low, high = wp.float64(p.reset_low), wp.float64(p.reset_high)
    for c in range(4):
        s.state[i, c] = s.state.dtype(uniform_range(key, c, low, high))


@wp.func
def advance(s: Any, p: Any, a: Any, i: int, t: int, step: int):
    """One step of env ``i`` under ``a.action[i, t]``; returns the reward and termination."""
    state = s.state
    now = wp.vector(state[i, 0], state[i, 1], state[i, 2], state[i, 3])
    new, reward, fell = _dynamics(now, a.action[i, t], p)
    for c in range(4):
        state[i, c] = new[c]
    return reward, fell


@wp.func
def observe(s: Any, p: Any, o: Any, i: int, t: int, step: int):
    """The state (``p.observe_velocity``), or ``(x, theta)``."""
    obs = o.observation
    if p.observe_velocity != 0:
        for c in range(4):
            obs[i, t, c] = s.state[i, c]
    else:
        obs[i, t, 0] = s.state[i, 0]
        obs[i, t, 1] = s.state[i, 2]
