"""Warp physics of the pendulum: the three functions the env base builds its kernels from.

The dynamics follow gymnasium's ``Pendulum-v1``: torque clipped to ``[-max_torque, max_torque]``,
explicit Euler on ``(theta, theta_dot)`` with the angular velocity clipped to ``max_speed``; the
reward is minus the quadratic cost of the state *before* the step. The state of one env is the
vector ``(theta, theta_dot)``.
"""

from __future__ import annotations

from typing import Any

import warp as wp

from torchrl_ext.envs._kernels.common import uniform_range


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
def advance(s: Any, p: Any, a: Any, i: int, t: int, step: int):
    """One step of env ``i`` under the torque ``a.action[i, t]``; never terminates."""
    new, reward, ended = _dynamics(wp.vector(s.state[i, 0], s.state[i, 1]), a.action[i, t], p)
    s.state[i, 0] = new[0]
    s.state[i, 1] = new[1]
    return reward, ended


@wp.func
def observe(s: Any, p: Any, o: Any, i: int, t: int, step: int):
    """``(cos theta, sin theta, theta_dot)``."""
    o.observation[i, t, 0] = wp.cos(s.state[i, 0])
    o.observation[i, t, 1] = wp.sin(s.state[i, 0])
    o.observation[i, t, 2] = s.state[i, 1]
