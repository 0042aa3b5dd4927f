"""Warp kernels of the pendulum: dynamics, masked reset, fused step with auto-reset, rollout.

The dynamics follow gymnasium's ``Pendulum-v1``: torque clipped to ``[-max_torque, max_torque]``,
explicit Euler on ``(theta, theta_dot)`` with the angular velocity clipped to ``max_speed``; the
reward is minus the quadratic cost of the state *before* the step. Constants arrive in a small
``params`` array of the state dtype, indexed by the ``P_*`` constants.
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
NUM_PARAMS = 9


@wp.func
def _angle_normalize(x: Any, p: wp.array(dtype=Any)) -> Any:
    """Wrap ``x`` into ``[-pi, pi)`` with a floored modulo (Python's ``%``)."""
    y = wp.mod(x + p[P_PI], p[P_TWO_PI])
    if y < p.dtype(0.0):
        y = y + p[P_TWO_PI]
    return y - p[P_PI]


@wp.func
def _advance(state: wp.array2d(dtype=Any), p: wp.array(dtype=Any), i: int, action: Any) -> Any:
    """One step of env ``i`` in place; return its reward (minus the pre-step cost)."""
    th = state[i, 0]
    thdot = state[i, 1]
    u = wp.clamp(action, -p[P_MAX_TORQUE], p[P_MAX_TORQUE])
    th_n = _angle_normalize(th, p)
    costs = th_n * th_n + p.dtype(0.1) * (thdot * thdot) + p.dtype(0.001) * (u * u)
    newthdot = thdot + (p[P_GRAVITY_COEF] * wp.sin(th) + p[P_TORQUE_COEF] * u) * p[P_DT]
    newthdot = wp.clamp(newthdot, -p[P_MAX_SPEED], p[P_MAX_SPEED])
    state[i, 0] = th + newthdot * p[P_DT]
    state[i, 1] = newthdot
    return -costs


@wp.func
def _sample(
    state: wp.array2d(dtype=Any),
    p: wp.array(dtype=Any),
    seed: wp.array(dtype=wp.uint32),
    steps: wp.array(dtype=wp.int32),
    episode: wp.array(dtype=wp.int32),
    i: int,
):
    """Start a new episode of env ``i``: angle uniform in ``[-pi, pi)``, speed in ``[-1, 1)``."""
    key = stream_key(seed, i, begin_episode(steps, episode, i))
    th_high = wp.float64(p[P_RESET_THETA])
    thdot_high = wp.float64(p[P_RESET_THETA_DOT])
    state[i, 0] = state.dtype(uniform_range(key, 0, -th_high, th_high))
    state[i, 1] = state.dtype(uniform_range(key, 1, -thdot_high, thdot_high))


@wp.func
def _observe(state: wp.array2d(dtype=Any), i: int, obs: wp.array2d(dtype=Any)):
    """Write env ``i``'s observation ``(cos theta, sin theta, theta_dot)``."""
    th = state[i, 0]
    obs[i, 0] = wp.cos(th)
    obs[i, 1] = wp.sin(th)
    obs[i, 2] = state[i, 1]


@wp.func
def _observe_at(state: wp.array2d(dtype=Any), i: int, obs: wp.array3d(dtype=Any), t: int):
    """Write env ``i``'s observation into time slot ``t`` of a ``[N, T, 3]`` buffer."""
    th = state[i, 0]
    obs[i, t, 0] = wp.cos(th)
    obs[i, t, 1] = wp.sin(th)
    obs[i, t, 2] = state[i, 1]


@wp.kernel
def pendulum_reset(
    state: wp.array2d(dtype=Any),
    mask: wp.array(dtype=wp.int32),
    params: wp.array(dtype=Any),
    seed: wp.array(dtype=wp.uint32),
    steps: wp.array(dtype=wp.int32),
    episode: wp.array(dtype=wp.int32),
    obs_root: wp.array2d(dtype=Any),
):
    """Reset the envs whose ``mask`` entry is nonzero; write every env's current observation."""
    i = wp.tid()
    if mask[i] != 0:
        _sample(state, params, seed, steps, episode, i)
    _observe(state, i, obs_root)


@wp.kernel
def pendulum_step(
    state: wp.array2d(dtype=Any),
    action: wp.array(dtype=Any),
    params: wp.array(dtype=Any),
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
    reward[i] = _advance(state, params, i, action[i])
    trunc = count_step(steps, i, max_steps)
    _observe(state, i, obs_next)
    terminated[i] = False
    truncated[i] = trunc
    done[i] = trunc
    if autoreset != 0:
        if trunc:
            _sample(state, params, seed, steps, episode, i)
        _observe(state, i, obs_root)


@wp.kernel
def pendulum_rollout(
    state: wp.array2d(dtype=Any),
    actions: wp.array2d(dtype=Any),
    params: wp.array(dtype=Any),
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
    """Run ``horizon`` auto-resetting steps into ``[N, T]`` outputs (no reset after the last)."""
    i = wp.tid()
    for t in range(horizon):
        _observe_at(state, i, obs_root, t)
        reward[i, t] = _advance(state, params, i, actions[i, t])
        trunc = count_step(steps, i, max_steps)
        _observe_at(state, i, obs_next, t)
        terminated[i, t] = False
        truncated[i, t] = trunc
        done[i, t] = trunc
        if trunc and t + 1 < horizon:
            _sample(state, params, seed, steps, episode, i)
