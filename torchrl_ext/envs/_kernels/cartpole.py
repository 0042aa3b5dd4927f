"""Warp physics of the cart-pole: the three functions the env base builds its kernels from.

The dynamics reproduce gymnasium's ``CartPole-v1`` operation by operation (same constants, same
evaluation order, explicit Euler), so a float64 simulation matches gymnasium bit for bit. The
state of one env is the vector ``(x, x_dot, theta, theta_dot)``.
"""

from __future__ import annotations

import math
from typing import Any

import warp as wp

from torchrl_ext.envs._kernels.common import uniform_range


def params() -> dict[str, float]:
    """Constants of ``CartPole-v1``, derived in double precision exactly as gymnasium does."""
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    return {
        "gravity": gravity,
        "masspole": masspole,
        "total_mass": masspole + masscart,
        "length": length,
        "polemass_length": masspole * length,
        "force_mag": force_mag,
        "tau": tau,
        "theta_limit": 12 * 2 * math.pi / 360,
        "x_limit": 2.4,
        "four_thirds": 4.0 / 3.0,
        "reset_low": -0.05,
        "reset_high": 0.05,
    }


@wp.func
def _dynamics(x: Any, x_dot: Any, theta: Any, theta_dot: Any, action: wp.int64, p: Any):
    """One explicit-Euler step pushed by ``action`` (1: ``+force_mag``, 0: ``-force_mag``).

    Returns the new ``(x, x_dot, theta, theta_dot)`` and whether the cart left the track or the
    pole leans past the angle limit.
    """
    force = p.force_mag
    if action == wp.int64(0):
        force = -force
    costheta = wp.cos(theta)
    sintheta = wp.sin(theta)
    temp = (force + p.polemass_length * (theta_dot * theta_dot) * sintheta) / p.total_mass
    denom = p.length * (p.four_thirds - p.masspole * (costheta * costheta) / p.total_mass)
    thetaacc = (p.gravity * sintheta - costheta * temp) / denom
    xacc = temp - p.polemass_length * thetaacc * costheta / p.total_mass
    new_x = x + p.tau * x_dot
    new_theta = theta + p.tau * theta_dot
    fell = (
        new_x < -p.x_limit
        or new_x > p.x_limit
        or new_theta < -p.theta_limit
        or new_theta > p.theta_limit
    )
    return new_x, x_dot + p.tau * xacc, new_theta, theta_dot + p.tau * thetaacc, fell


@wp.func
def start(s: Any, p: Any, i: int, key: wp.uint32):
    """A new episode: every state component uniform in ``[reset_low, reset_high)``."""
    low, high = wp.float64(p.reset_low), wp.float64(p.reset_high)
    for c in range(4):
        s.state[i, c] = s.state.dtype(uniform_range(key, c, low, high))


@wp.func
def advance(s: Any, p: Any, a: Any, i: int, step: int, key: wp.uint32):
    """One step of env ``i`` under ``a.action[i]``; returns the reward and termination."""
    st = s.state
    x, x_dot, theta, theta_dot, fell = _dynamics(
        st[i, 0], st[i, 1], st[i, 2], st[i, 3], a.action[i], p
    )
    st[i, 0] = x
    st[i, 1] = x_dot
    st[i, 2] = theta
    st[i, 3] = theta_dot
    return 1.0, fell


@wp.func
def observe(s: Any, p: Any, o: Any, i: int, step: int, key: wp.uint32):
    """The state (``p.observe_velocity``), or ``(x, theta)``."""
    obs = o.observation
    if p.observe_velocity != 0:
        for c in range(4):
            obs[i, c] = s.state[i, c]
    else:
        obs[i, 0] = s.state[i, 0]
        obs[i, 1] = s.state[i, 2]
