"""Warp physics of the pendulum; its reset and ``T``-step kernels come from ``vector_state``.

The dynamics follow gymnasium's ``Pendulum-v1``: torque clipped to ``[-max_torque, max_torque]``,
explicit Euler on ``(theta, theta_dot)`` with the angular velocity clipped to ``max_speed``; the
reward is minus the quadratic cost of the state *before* the step. The state of one env is the
vector ``(theta, theta_dot)``.
"""

from __future__ import annotations

from typing import Any

import warp as wp

from torchrl_ext.envs._kernels.common import (
    param_structs,
)
from torchrl_ext.envs._kernels.vector_state import make_kernels

PARAMS = param_structs(
    "PendulumParams",
    (
        "max_speed",
        "max_torque",
        "dt",
        "gravity_coef",
        "torque_coef",
        "reset_theta",
        "reset_theta_dot",
        "pi",
        "two_pi",
        "cost_speed",
        "cost_torque",
        "zero",
    ),
    __name__,
)


@wp.func
def _angle_normalize(x: Any, p: Any):
    """Wrap ``x`` into ``[-pi, pi)`` with a floored modulo (Python's ``%``)."""
    y = wp.mod(x + p.pi, p.two_pi)
    if y < p.zero:
        y = y + p.two_pi
    return y - p.pi


@wp.func
def _dynamics(s: Any, action: Any, p: Any):
    """One step under torque ``action``; returns the new state, the reward and False."""
    th, thdot = s[0], s[1]
    u = wp.clamp(action, -p.max_torque, p.max_torque)
    th_n = _angle_normalize(th, p)
    costs = th_n * th_n + p.cost_speed * (thdot * thdot) + p.cost_torque * (u * u)
    newthdot = thdot + (p.gravity_coef * wp.sin(th) + p.torque_coef * u) * p.dt
    newthdot = wp.clamp(newthdot, -p.max_speed, p.max_speed)
    return wp.vector(th + newthdot * p.dt, newthdot), -costs, False


@wp.func
def _reset_box(p: Any):
    """Angle in ``[-pi, pi)``, speed in ``[-1, 1)``."""
    th, thdot = wp.float64(p.reset_theta), wp.float64(p.reset_theta_dot)
    return wp.vector(-th, -thdot), wp.vector(th, thdot)


@wp.func
def _observe(obs: wp.array3d(dtype=Any), i: int, t: int, s: Any, obs_mode: int):
    """``(cos theta, sin theta, theta_dot)``."""
    obs[i, t, 0] = wp.cos(s[0])
    obs[i, t, 1] = wp.sin(s[0])
    obs[i, t, 2] = s[1]


KERNELS = make_kernels(2, PARAMS, _reset_box, _dynamics, _observe, __name__)
