"""Warp kernels of the pendulum: dynamics, masked reset and one kernel for T steps.

The dynamics follow gymnasium's ``Pendulum-v1``: torque clipped to ``[-max_torque, max_torque]``,
explicit Euler on ``(theta, theta_dot)`` with the angular velocity clipped to ``max_speed``; the
reward is minus the quadratic cost of the state *before* the step. Constants arrive by value as one
:data:`PARAMS` struct of the state dtype. :func:`pendulum_steps` is the only stepping kernel (step,
fused step and rollout, as for the cart-pole).
"""

from __future__ import annotations

from typing import Any

import warp as wp

from torchrl_ext.envs._kernels.common import (
    Episodes,
    count_step,
    next_episode_key,
    param_structs,
    uniform_range,
)

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
def _dynamics(th: Any, thdot: Any, action: Any, p: Any):
    """One step from ``(th, thdot)`` under torque ``action``; returns ``(th, thdot, reward)``."""
    u = wp.clamp(action, -p.max_torque, p.max_torque)
    th_n = _angle_normalize(th, p)
    costs = th_n * th_n + p.cost_speed * (thdot * thdot) + p.cost_torque * (u * u)
    newthdot = thdot + (p.gravity_coef * wp.sin(th) + p.torque_coef * u) * p.dt
    newthdot = wp.clamp(newthdot, -p.max_speed, p.max_speed)
    return th + newthdot * p.dt, newthdot, -costs


# The same-shape helpers of the cart-pole differ in their state: each lists its own columns.
@wp.func
def _begin(
    state: wp.array2d(dtype=Any),
    p: Any,
    episodes: Episodes,
    i: int,
):
    """Start env ``i``'s next episode: angle uniform in ``[-pi, pi)``, speed in ``[-1, 1)``."""
    key = next_episode_key(episodes, i)
    th_high = wp.float64(p.reset_theta)
    thdot_high = wp.float64(p.reset_theta_dot)
    return (
        state.dtype(uniform_range(key, 0, -th_high, th_high)),
        state.dtype(uniform_range(key, 1, -thdot_high, thdot_high)),
    )


@wp.func
def _load(state: wp.array2d(dtype=Any), i: int):
    """Read env ``i``'s state as ``(theta, theta_dot)``."""
    return state[i, 0], state[i, 1]


@wp.func
def _observe(obs: wp.array3d(dtype=Any), i: int, t: int, th: Any, thdot: Any):
    """Write ``(cos theta, sin theta, theta_dot)`` into slot ``t`` of ``[N, S, 3]`` if it exists."""
    if t >= 0 and t < obs.shape[1]:
        obs[i, t, 0] = wp.cos(th)
        obs[i, t, 1] = wp.sin(th)
        obs[i, t, 2] = thdot


@wp.kernel
def pendulum_reset(
    state: wp.array2d(dtype=Any),
    mask: wp.array(dtype=wp.int32),
    params: Any,
    episodes: Episodes,
    obs_root: wp.array3d(dtype=Any),
):
    """Reset the envs whose ``mask`` entry is nonzero; write every env's observation (slot 0)."""
    i = wp.tid()
    th, thdot = _load(state, i)
    if mask[i] != 0:
        th, thdot = _begin(state, params, episodes, i)
        state[i, 0] = th
        state[i, 1] = thdot
    _observe(obs_root, i, 0, th, thdot)


@wp.kernel
def pendulum_steps(
    state: wp.array2d(dtype=Any),
    actions: wp.array2d(dtype=Any),
    params: Any,
    episodes: Episodes,
    max_steps: int,
    reset_last: int,
    root_from: int,
    obs_root: wp.array3d(dtype=Any),
    obs_next: wp.array3d(dtype=Any),
    reward: wp.array2d(dtype=Any),
    terminated: wp.array2d(dtype=wp.bool),
    truncated: wp.array2d(dtype=wp.bool),
    done: wp.array2d(dtype=wp.bool),
):
    """Run ``T = actions.shape[1]`` steps of every env, resetting the truncated ones in between.

    Same contract as ``cartpole_steps``: slot ``t`` of the ``next`` outputs is step ``t``; a done
    env resets before the next step, after the last one only if ``reset_last``; state ``t`` is
    observed into ``obs_root`` slot ``t - root_from`` if that slot exists.
    """
    i = wp.tid()
    horizon = actions.shape[1]
    th, thdot = _load(state, i)
    _observe(obs_root, i, -root_from, th, thdot)
    for t in range(horizon):
        th, thdot, r = _dynamics(th, thdot, actions[i, t], params)
        trunc = count_step(episodes.steps, i, max_steps)
        _observe(obs_next, i, t, th, thdot)
        reward[i, t] = r
        terminated[i, t] = False
        truncated[i, t] = trunc
        done[i, t] = trunc
        if trunc and (t + 1 < horizon or reset_last != 0):
            th, thdot = _begin(state, params, episodes, i)
        _observe(obs_root, i, t + 1 - root_from, th, thdot)
    state[i, 0] = th
    state[i, 1] = thdot
