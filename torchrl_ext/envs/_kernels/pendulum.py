"""Warp kernels of the pendulum: dynamics, masked reset, fused step with auto-reset, rollout.

The dynamics follow gymnasium's ``Pendulum-v1``: torque clipped to ``[-max_torque, max_torque]``,
explicit Euler on ``(theta, theta_dot)`` with the angular velocity clipped to ``max_speed``; the
reward is minus the quadratic cost of the state *before* the step. Constants arrive by value as one
Warp vector of the state dtype (``params``, indexed by the ``P_*`` constants).
"""

from __future__ import annotations

from typing import Any

import warp as wp

from torchrl_ext.envs._kernels.common import begin_episode, count_step, stream_key, uniform_range

P_MAX_SPEED = 0
P_MAX_TORQUE = 1
P_DT = 2
P_GRAVITY_COEF = 3
P_TORQUE_COEF = 4
P_RESET_THETA = 5
P_RESET_THETA_DOT = 6
P_PI = 7
P_TWO_PI = 8
P_COST_SPEED = 9
P_COST_TORQUE = 10
P_ZERO = 11
NUM_PARAMS = 12


@wp.func
def _angle_normalize(x: Any, p: Any):
    """Wrap ``x`` into ``[-pi, pi)`` with a floored modulo (Python's ``%``)."""
    y = wp.mod(x + p[P_PI], p[P_TWO_PI])
    if y < p[P_ZERO]:
        y = y + p[P_TWO_PI]
    return y - p[P_PI]


@wp.func
def _dynamics(th: Any, thdot: Any, action: Any, p: Any):
    """One step from ``(th, thdot)`` under torque ``action``; returns ``(th, thdot, reward)``."""
    u = wp.clamp(action, -p[P_MAX_TORQUE], p[P_MAX_TORQUE])
    th_n = _angle_normalize(th, p)
    costs = th_n * th_n + p[P_COST_SPEED] * (thdot * thdot) + p[P_COST_TORQUE] * (u * u)
    newthdot = thdot + (p[P_GRAVITY_COEF] * wp.sin(th) + p[P_TORQUE_COEF] * u) * p[P_DT]
    newthdot = wp.clamp(newthdot, -p[P_MAX_SPEED], p[P_MAX_SPEED])
    return th + newthdot * p[P_DT], newthdot, -costs


@wp.func
def _begin(
    state: wp.array2d(dtype=Any),
    p: Any,
    seed: wp.array(dtype=wp.uint32),
    steps: wp.array(dtype=wp.int32),
    episode: wp.array(dtype=wp.int32),
    i: int,
):
    """Start env ``i``'s next episode: angle uniform in ``[-pi, pi)``, speed in ``[-1, 1)``."""
    key = stream_key(seed, i, begin_episode(steps, episode, i))
    th_high = wp.float64(p[P_RESET_THETA])
    thdot_high = wp.float64(p[P_RESET_THETA_DOT])
    return (
        state.dtype(uniform_range(key, 0, -th_high, th_high)),
        state.dtype(uniform_range(key, 1, -thdot_high, thdot_high)),
    )


@wp.func
def _load(state: wp.array2d(dtype=Any), i: int):
    """Read env ``i``'s state as ``(theta, theta_dot)``."""
    return state[i, 0], state[i, 1]


@wp.func
def _observe(obs: wp.array2d(dtype=Any), i: int, th: Any, thdot: Any):
    """Write env ``i``'s observation ``(cos theta, sin theta, theta_dot)``."""
    obs[i, 0] = wp.cos(th)
    obs[i, 1] = wp.sin(th)
    obs[i, 2] = thdot


@wp.func
def _observe_at(obs: wp.array3d(dtype=Any), i: int, t: int, th: Any, thdot: Any):
    """Write env ``i``'s observation into time slot ``t`` of a ``[N, T, 3]`` buffer."""
    obs[i, t, 0] = wp.cos(th)
    obs[i, t, 1] = wp.sin(th)
    obs[i, t, 2] = thdot


@wp.kernel
def pendulum_reset(
    state: wp.array2d(dtype=Any),
    mask: wp.array(dtype=wp.int32),
    params: Any,
    seed: wp.array(dtype=wp.uint32),
    steps: wp.array(dtype=wp.int32),
    episode: wp.array(dtype=wp.int32),
    obs_root: wp.array2d(dtype=Any),
):
    """Reset the envs whose ``mask`` entry is nonzero; write every env's current observation."""
    i = wp.tid()
    th, thdot = _load(state, i)
    if mask[i] != 0:
        th, thdot = _begin(state, params, seed, steps, episode, i)
        state[i, 0] = th
        state[i, 1] = thdot
    _observe(obs_root, i, th, thdot)


@wp.kernel
def pendulum_step(
    state: wp.array2d(dtype=Any),
    action: wp.array(dtype=Any),
    params: Any,
    seed: wp.array(dtype=wp.uint32),
    steps: wp.array(dtype=wp.int32),
    episode: wp.array(dtype=wp.int32),
    max_steps: int,
    autoreset: int,
    obs_next: wp.array2d(dtype=Any),
    obs_root: wp.array2d(dtype=Any),
    reward: wp.array(dtype=Any),
    terminated: wp.array(dtype=wp.bool),
    truncated: wp.array(dtype=wp.bool),
    done: wp.array(dtype=wp.bool),
):
    """Step every env; with ``autoreset`` also reset truncated envs and write the next root obs."""
    i = wp.tid()
    th, thdot = _load(state, i)
    th, thdot, r = _dynamics(th, thdot, action[i], params)
    trunc = count_step(steps, i, max_steps)
    _observe(obs_next, i, th, thdot)
    reward[i] = r
    terminated[i] = False
    truncated[i] = trunc
    done[i] = trunc
    if autoreset != 0:
        if trunc:
            th, thdot = _begin(state, params, seed, steps, episode, i)
        _observe(obs_root, i, th, thdot)
    state[i, 0] = th
    state[i, 1] = thdot


@wp.kernel
def pendulum_rollout(
    state: wp.array2d(dtype=Any),
    actions: wp.array2d(dtype=Any),
    params: Any,
    seed: wp.array(dtype=wp.uint32),
    steps: wp.array(dtype=wp.int32),
    episode: wp.array(dtype=wp.int32),
    max_steps: int,
    horizon: int,
    obs_root: wp.array3d(dtype=Any),
    obs_next: wp.array3d(dtype=Any),
    reward: wp.array2d(dtype=Any),
    terminated: wp.array2d(dtype=wp.bool),
    truncated: wp.array2d(dtype=wp.bool),
    done: wp.array2d(dtype=wp.bool),
):
    """Run ``horizon`` auto-resetting steps into ``[N, T]`` outputs (no reset after the last).

    ``actions`` is ``[N, T]``: ``actions[i, t]`` is env ``i``'s action at step ``t``.
    """
    i = wp.tid()
    th, thdot = _load(state, i)
    for t in range(horizon):
        _observe_at(obs_root, i, t, th, thdot)
        th, thdot, r = _dynamics(th, thdot, actions[i, t], params)
        trunc = count_step(steps, i, max_steps)
        _observe_at(obs_next, i, t, th, thdot)
        reward[i, t] = r
        terminated[i, t] = False
        truncated[i, t] = trunc
        done[i, t] = trunc
        if trunc and t + 1 < horizon:
            th, thdot = _begin(state, params, seed, steps, episode, i)
    state[i, 0] = th
    state[i, 1] = thdot
