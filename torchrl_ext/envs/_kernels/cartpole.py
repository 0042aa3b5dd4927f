"""Warp kernels of the cart-pole: dynamics, masked reset, fused step with auto-reset, rollout.

The dynamics reproduce gymnasium's ``CartPole-v1`` operation by operation (same constants, same
evaluation order, explicit Euler), so a float64 simulation matches gymnasium bit for bit. Physical
constants arrive by value as one Warp vector of the state dtype (``params``, indexed by the ``P_*``
constants), so the compiler keeps them in registers. The state of one env is carried in local
variables ``(x, x_dot, theta, theta_dot)`` between loads and stores.
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
def _force(action: wp.int64, p: Any):
    """The push of ``action``: ``+force_mag`` for 1, ``-force_mag`` for 0."""
    force = p[P_FORCE_MAG]
    if action == wp.int64(0):
        force = -force
    return force


@wp.func
def _dynamics(x: Any, x_dot: Any, theta: Any, theta_dot: Any, force: Any, p: Any):
    """One explicit-Euler step; returns the new ``(x, x_dot, theta, theta_dot)``."""
    costheta = wp.cos(theta)
    sintheta = wp.sin(theta)
    temp = (force + p[P_POLEMASS_LENGTH] * (theta_dot * theta_dot) * sintheta) / p[P_TOTAL_MASS]
    denom = p[P_LENGTH] * (
        p[P_FOUR_THIRDS] - p[P_MASSPOLE] * (costheta * costheta) / p[P_TOTAL_MASS]
    )
    thetaacc = (p[P_GRAVITY] * sintheta - costheta * temp) / denom
    xacc = temp - p[P_POLEMASS_LENGTH] * thetaacc * costheta / p[P_TOTAL_MASS]
    return (
        x + p[P_TAU] * x_dot,
        x_dot + p[P_TAU] * xacc,
        theta + p[P_TAU] * theta_dot,
        theta_dot + p[P_TAU] * thetaacc,
    )


@wp.func
def _fell(x: Any, theta: Any, p: Any) -> bool:
    """Whether the cart left the track or the pole leans past the angle limit."""
    x_lim = p[P_X_LIMIT]
    t_lim = p[P_THETA_LIMIT]
    return x < -x_lim or x > x_lim or theta < -t_lim or theta > t_lim


@wp.func
def _initial(key: wp.uint32, p: Any, state: wp.array2d(dtype=Any)):
    """A start state uniform in ``[low, high)^4`` from the stream ``key``, in the state dtype."""
    low = wp.float64(p[P_RESET_LOW])
    high = wp.float64(p[P_RESET_HIGH])
    return (
        state.dtype(uniform_range(key, 0, low, high)),
        state.dtype(uniform_range(key, 1, low, high)),
        state.dtype(uniform_range(key, 2, low, high)),
        state.dtype(uniform_range(key, 3, low, high)),
    )


@wp.func
def _load(state: wp.array2d(dtype=Any), i: int):
    """Read env ``i``'s state as ``(x, x_dot, theta, theta_dot)``."""
    return state[i, 0], state[i, 1], state[i, 2], state[i, 3]


@wp.func
def _store(state: wp.array2d(dtype=Any), i: int, x: Any, x_dot: Any, theta: Any, theta_dot: Any):
    """Write env ``i``'s state."""
    state[i, 0] = x
    state[i, 1] = x_dot
    state[i, 2] = theta
    state[i, 3] = theta_dot


@wp.func
def _observe(
    obs: wp.array2d(dtype=Any), i: int, x: Any, x_dot: Any, theta: Any, theta_dot: Any, full: int
):
    """Write env ``i``'s observation: the state, or ``(x, theta)`` when ``full == 0``."""
    if full != 0:
        _store(obs, i, x, x_dot, theta, theta_dot)
    else:
        obs[i, 0] = x
        obs[i, 1] = theta


@wp.func
def _observe_at(
    obs: wp.array3d(dtype=Any),
    i: int,
    t: int,
    x: Any,
    x_dot: Any,
    theta: Any,
    theta_dot: Any,
    full: int,
):
    """Write env ``i``'s observation into time slot ``t`` of a ``[N, T, D]`` buffer."""
    if full != 0:
        obs[i, t, 0] = x
        obs[i, t, 1] = x_dot
        obs[i, t, 2] = theta
        obs[i, t, 3] = theta_dot
    else:
        obs[i, t, 0] = x
        obs[i, t, 1] = theta


@wp.func
def _begin(
    state: wp.array2d(dtype=Any),
    p: Any,
    seed: wp.array(dtype=wp.uint32),
    steps: wp.array(dtype=wp.int32),
    episode: wp.array(dtype=wp.int32),
    i: int,
):
    """Start env ``i``'s next episode: bump its counters and draw its start state."""
    return _initial(stream_key(seed, i, begin_episode(steps, episode, i)), p, state)


@wp.kernel
def cartpole_reset(
    state: wp.array2d(dtype=Any),
    mask: wp.array(dtype=wp.int32),
    params: Any,
    seed: wp.array(dtype=wp.uint32),
    steps: wp.array(dtype=wp.int32),
    episode: wp.array(dtype=wp.int32),
    obs_root: wp.array2d(dtype=Any),
    full: int,
):
    """Reset the envs whose ``mask`` entry is nonzero; write every env's current observation."""
    i = wp.tid()
    x, x_dot, theta, theta_dot = _load(state, i)
    if mask[i] != 0:
        x, x_dot, theta, theta_dot = _begin(state, params, seed, steps, episode, i)
        _store(state, i, x, x_dot, theta, theta_dot)
    _observe(obs_root, i, x, x_dot, theta, theta_dot, full)


@wp.kernel
def cartpole_step(
    state: wp.array2d(dtype=Any),
    action: wp.array(dtype=wp.int64),
    params: Any,
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
    p = params
    x, x_dot, theta, theta_dot = _load(state, i)
    x, x_dot, theta, theta_dot = _dynamics(x, x_dot, theta, theta_dot, _force(action[i], p), p)
    term = _fell(x, theta, p)
    trunc = count_step(steps, i, max_steps)
    _observe(obs_next, i, x, x_dot, theta, theta_dot, full)
    reward[i] = reward.dtype(1.0)
    terminated[i] = term
    truncated[i] = trunc
    done[i] = term or trunc
    if autoreset != 0:
        if term or trunc:
            x, x_dot, theta, theta_dot = _begin(state, p, seed, steps, episode, i)
        _observe(obs_root, i, x, x_dot, theta, theta_dot, full)
    _store(state, i, x, x_dot, theta, theta_dot)


@wp.kernel
def cartpole_rollout(
    state: wp.array2d(dtype=Any),
    actions: wp.array2d(dtype=wp.int64),
    params: Any,
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
    """Run ``horizon`` auto-resetting steps into ``[N, T]`` outputs (no reset after the last).

    ``actions`` is ``[N, T]``: ``actions[i, t]`` is env ``i``'s action at step ``t``.
    """
    i = wp.tid()
    p = params
    one = reward.dtype(1.0)
    x, x_dot, theta, theta_dot = _load(state, i)
    for t in range(horizon):
        _observe_at(obs_root, i, t, x, x_dot, theta, theta_dot, full)
        x, x_dot, theta, theta_dot = _dynamics(
            x, x_dot, theta, theta_dot, _force(actions[i, t], p), p
        )
        term = _fell(x, theta, p)
        trunc = count_step(steps, i, max_steps)
        _observe_at(obs_next, i, t, x, x_dot, theta, theta_dot, full)
        reward[i, t] = one
        terminated[i, t] = term
        truncated[i, t] = trunc
        done[i, t] = term or trunc
        if (term or trunc) and t + 1 < horizon:
            x, x_dot, theta, theta_dot = _begin(state, p, seed, steps, episode, i)
    _store(state, i, x, x_dot, theta, theta_dot)
