"""Warp physics of the cart-pole; its reset and ``T``-step kernels come from ``vector_state``.

The dynamics reproduce gymnasium's ``CartPole-v1`` operation by operation (same constants, same
evaluation order, explicit Euler), so a float64 simulation matches gymnasium bit for bit. The
state of one env is the vector ``(x, x_dot, theta, theta_dot)``.
"""

from __future__ import annotations

from typing import Any

import warp as wp

from torchrl_ext.envs._kernels.common import (
    param_structs,
)
from torchrl_ext.envs._kernels.vector_state import make_kernels

PARAMS = param_structs(
    "CartPoleParams",
    (
        "gravity",
        "masspole",
        "total_mass",
        "length",
        "polemass_length",
        "force_mag",
        "tau",
        "theta_limit",
        "x_limit",
        "four_thirds",
        "reset_low",
        "reset_high",
    ),
    __name__,
)


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
def _reset_box(p: Any):
    """``[low, high)^4``."""
    low, high = wp.float64(p.reset_low), wp.float64(p.reset_high)
    return wp.vector(low, low, low, low), wp.vector(high, high, high, high)


@wp.func
def _observe(obs: wp.array3d(dtype=Any), i: int, t: int, s: Any, full: int):
    """The state (``full``), or ``(x, theta)``."""
    if full != 0:
        for c in range(4):
            obs[i, t, c] = s[c]
    else:
        obs[i, t, 0] = s[0]
        obs[i, t, 1] = s[2]


KERNELS = make_kernels(4, PARAMS, _reset_box, _dynamics, _observe, __name__)
