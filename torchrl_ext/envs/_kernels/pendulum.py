"""Warp physics of the pendulum: the three functions the env base builds its kernels from.

The dynamics follow gymnasium's ``Pendulum-v1``: torque clipped to ``[-max_torque, max_torque]``,
explicit Euler on ``(theta, theta_dot)`` with the angular velocity clipped to ``max_speed``; the
reward is minus the quadratic cost of the state *before* the step. The state of one env is the
vector ``(theta, theta_dot)``.
"""

from __future__ import annotations

import math
from typing import Any

import warp as wp

from torchrl_ext.envs._kernels.common import uniform_range

#: The largest torque, in either direction (the action bound).
MAX_TORQUE = 2.0


def params() -> dict[str, float]:
    """Constants of ``Pendulum-v1`` (g = 10, m = l = 1), derived as gymnasium does."""
    gravity, mass, length = 10.0, 1.0, 1.0
    return {
        "max_speed": 8.0,
        "max_torque": MAX_TORQUE,
        "dt": 0.05,
        "gravity_coef": 3 * gravity / (2 * length),
        "torque_coef": 3.0 / (mass * length**2),
        "reset_theta": math.pi,
        "reset_theta_dot": 1.0,
        "pi": math.pi,
        "two_pi": 2 * math.pi,
        "cost_speed": 0.1,
        "cost_torque": 0.001,
        "zero": 0.0,
    }


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
def start(s: Any, p: Any, i: int, key: wp.uint32):
    """A new episode: angle uniform in ``[-pi, pi)``, speed in ``[-1, 1)``."""
    th, thdot = wp.float64(p.reset_theta), wp.float64(p.reset_theta_dot)
    s.state[i, 0] = s.state.dtype(uniform_range(key, 0, -th, th))
    s.state[i, 1] = s.state.dtype(uniform_range(key, 1, -thdot, thdot))


@wp.func
def advance(s: Any, p: Any, a: Any, i: int, step: int, key: wp.uint32):
    """One step of env ``i`` under the torque ``a.action[i]``; never terminates."""
    new, reward, ended = _dynamics(wp.vector(s.state[i, 0], s.state[i, 1]), a.action[i], p)
    s.state[i, 0] = new[0]
    s.state[i, 1] = new[1]
    return reward, ended


@wp.func
def observe(s: Any, p: Any, o: Any, i: int, step: int, key: wp.uint32):
    """``(cos theta, sin theta, theta_dot)``."""
    o.observation[i, 0] = wp.cos(s.state[i, 0])
    o.observation[i, 1] = wp.sin(s.state[i, 0])
    o.observation[i, 2] = s.state[i, 1]
