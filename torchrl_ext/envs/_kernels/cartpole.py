"""Warp kernels of the cart-pole: dynamics, masked reset, fused step with auto-reset, rollout.

The dynamics reproduce gymnasium's ``CartPole-v1`` operation by operation (same constants, same
evaluation order, explicit Euler), so a float64 simulation matches gymnasium bit for bit. Physical
constants arrive in a small ``params`` array of the state dtype, indexed by the ``P_*`` constants.
"""

from __future__ import annotations

from typing import Any

import warp as wp

from torchrl_ext.envs._kernels.common import begin_episode, count_step, stream_key, uniform_range

P_GRAVITY = 0
P_MASSPOLE = 1
P_TOTAL_MASS = 2
P_LENGTH = 3
P_POLEMASS_LENGTH = 4
P_FORCE_MAG = 5
P_TAU = 6
P_THETA_LIMIT = 7
P_X_LIMIT = 8
P_FOUR_THIRDS = 9
P_RESET_LOW = 10
P_RESET_HIGH = 11
NUM_PARAMS = 12


@wp.func
def _advance(
    state: wp.array2d(dtype=Any), p: wp.array(dtype=Any), i: int, action: wp.int64
) -> bool:
    """One explicit-Euler step of env ``i`` in place; return whether the pole or cart fell."""
    x = state[i, 0]
    x_dot = state[i, 1]
    theta = state[i, 2]
    theta_dot = state[i, 3]
    force = p[P_FORCE_MAG]
    if action == wp.int64(0):
        force = -force
    costheta = wp.cos(theta)
    sintheta = wp.sin(theta)
    temp = (force + p[P_POLEMASS_LENGTH] * (theta_dot * theta_dot) * sintheta) / p[P_TOTAL_MASS]
    denom = p[P_LENGTH] * (
        p[P_FOUR_THIRDS] - p[P_MASSPOLE] * (costheta * costheta) / p[P_TOTAL_MASS]
    )
    thetaacc = (p[P_GRAVITY] * sintheta - costheta * temp) / denom
    xacc = temp - p[P_POLEMASS_LENGTH] * thetaacc * costheta / p[P_TOTAL_MASS]
    x = x + p[P_TAU] * x_dot
    x_dot = x_dot + p[P_TAU] * xacc
    theta = theta + p[P_TAU] * theta_dot
    theta_dot = theta_dot + p[P_TAU] * thetaacc
    state[i, 0] = x
    state[i, 1] = x_dot
    state[i, 2] = theta
    state[i, 3] = theta_dot
    x_lim = p[P_X_LIMIT]
    t_lim = p[P_THETA_LIMIT]
    return x < -x_lim or x > x_lim or theta < -t_lim or theta > t_lim


@wp.func
def _sample(
    state: wp.array2d(dtype=Any),
    p: wp.array(dtype=Any),
    seed: wp.array(dtype=wp.uint32),
    steps: wp.array(dtype=wp.int32),
    episode: wp.array(dtype=wp.int32),
    i: int,
):
    """Start a new episode of env ``i``: state uniform in ``[low, high)^4`` from its stream."""
    key = stream_key(seed, i, begin_episode(steps, episode, i))
    low = wp.float64(p[P_RESET_LOW])
    high = wp.float64(p[P_RESET_HIGH])
    for j in range(4):
        state[i, j] = state.dtype(uniform_range(key, j, low, high))


@wp.func
def _observe(state: wp.array2d(dtype=Any), i: int, obs: wp.array2d(dtype=Any), full: int):
    """Write env ``i``'s observation: the state, or only positions when ``full == 0``."""
    if full != 0:
        for j in range(4):
            obs[i, j] = state[i, j]
    else:
        obs[i, 0] = state[i, 0]
        obs[i, 1] = state[i, 2]


@wp.func
def _observe_at(
    state: wp.array2d(dtype=Any), i: int, obs: wp.array3d(dtype=Any), t: int, full: int
):
    """Write env ``i``'s observation into time slot ``t`` of a ``[N, T, D]`` buffer."""
    if full != 0:
        for j in range(4):
            obs[i, t, j] = state[i, j]
    else:
        obs[i, t, 0] = state[i, 0]
        obs[i, t, 1] = state[i, 2]


@wp.kernel
def cartpole_reset(
    state: wp.array2d(dtype=Any),
    mask: wp.array(dtype=wp.int32),
    params: wp.array(dtype=Any),
    seed: wp.array(dtype=wp.uint32),
    steps: wp.array(dtype=wp.int32),
    episode: wp.array(dtype=wp.int32),
    obs_root: wp.array2d(dtype=Any),
    full: int,
):
    """Reset the envs whose ``mask`` entry is nonzero; write every env's current observation."""
    i = wp.tid()
    if mask[i] != 0:
        _sample(state, params, seed, steps, episode, i)
    _observe(state, i, obs_root, full)


@wp.kernel
def cartpole_step(
    state: wp.array2d(dtype=Any),
    action: wp.array(dtype=wp.int64),
    params: wp.array(dtype=Any),
    seed: wp.array(dtype=wp.uint32),
    steps: wp.array(dtype=wp.int32),
    episode: wp.array(dtype=wp.int32),
    max_steps: int,
    autoreset: int,
    full: int,
    obs_next: wp.array2d(dtype=Any),
    obs_root: wp.array2d(dtype=Any),
    reward: wp.array(dtype=Any),
    terminated: wp.array(dtype=wp.bool),
    truncated: wp.array(dtype=wp.bool),
    done: wp.array(dtype=wp.bool),
):
    """Step every env; with ``autoreset`` also reset the done ones and write the next root obs."""
    i = wp.tid()
    term = _advance(state, params, i, action[i])
    trunc = count_step(steps, i, max_steps)
    _observe(state, i, obs_next, full)
    reward[i] = reward.dtype(1.0)
    terminated[i] = term
    truncated[i] = trunc
    done[i] = term or trunc
    if autoreset != 0:
        if term or trunc:
            _sample(state, params, seed, steps, episode, i)
        _observe(state, i, obs_root, full)


@wp.kernel
def cartpole_rollout(
    state: wp.array2d(dtype=Any),
    actions: wp.array2d(dtype=wp.int64),
    params: wp.array(dtype=Any),
    seed: wp.array(dtype=wp.uint32),
    steps: wp.array(dtype=wp.int32),
    episode: wp.array(dtype=wp.int32),
    max_steps: int,
    horizon: int,
    full: int,
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
        _observe_at(state, i, obs_root, t, full)
        term = _advance(state, params, i, actions[i, t])
        trunc = count_step(steps, i, max_steps)
        _observe_at(state, i, obs_next, t, full)
        reward[i, t] = reward.dtype(1.0)
        terminated[i, t] = term
        truncated[i, t] = trunc
        done[i, t] = term or trunc
        if (term or trunc) and t + 1 < horizon:
            _sample(state, params, seed, steps, episode, i)
