"""Warp kernels of the cart-pole: dynamics, masked reset and one kernel for T steps.

The dynamics reproduce gymnasium's ``CartPole-v1`` operation by operation (same constants, same
evaluation order, explicit Euler), so a float64 simulation matches gymnasium bit for bit. Physical
constants arrive by value as one :data:`PARAMS` struct of the state dtype, so the compiler keeps
them in registers. The state of one env is carried in local variables ``(x, x_dot, theta,
theta_dot)`` between loads and stores.

:func:`_advance` is the one step of the cart-pole, dynamics and bookkeeping: :func:`cartpole_steps`
loops it (a rollout of ``T`` steps into ``[N, T]`` outputs), :func:`cartpole_step` runs it once
(a step or fused step, on ``[N, 1]`` views of the step buffers).
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
def _force(action: wp.int64, p: Any):
    """The push of ``action``: ``+force_mag`` for 1, ``-force_mag`` for 0."""
    force = p.force_mag
    if action == wp.int64(0):
        force = -force
    return force


@wp.func
def _dynamics(x: Any, x_dot: Any, theta: Any, theta_dot: Any, force: Any, p: Any):
    """One explicit-Euler step; returns the new ``(x, x_dot, theta, theta_dot)``."""
    costheta = wp.cos(theta)
    sintheta = wp.sin(theta)
    temp = (force + p.polemass_length * (theta_dot * theta_dot) * sintheta) / p.total_mass
    denom = p.length * (p.four_thirds - p.masspole * (costheta * costheta) / p.total_mass)
    thetaacc = (p.gravity * sintheta - costheta * temp) / denom
    xacc = temp - p.polemass_length * thetaacc * costheta / p.total_mass
    return (
        x + p.tau * x_dot,
        x_dot + p.tau * xacc,
        theta + p.tau * theta_dot,
        theta_dot + p.tau * thetaacc,
    )


@wp.func
def _fell(x: Any, theta: Any, p: Any) -> bool:
    """Whether the cart left the track or the pole leans past the angle limit."""
    return x < -p.x_limit or x > p.x_limit or theta < -p.theta_limit or theta > p.theta_limit


@wp.func
def _begin(
    state: wp.array2d(dtype=Any),
    p: Any,
    episodes: Episodes,
    i: int,
):
    """Start env ``i``'s next episode: bump its counters, draw a state uniform in [low, high)^4."""
    key = next_episode_key(episodes, i)
    low = wp.float64(p.reset_low)
    high = wp.float64(p.reset_high)
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
    obs: wp.array3d(dtype=Any),
    i: int,
    t: int,
    x: Any,
    x_dot: Any,
    theta: Any,
    theta_dot: Any,
    full: int,
):
    """Write env ``i``'s observation into slot ``t`` of ``[N, S, D]``: the state, or ``(x, theta)``.

    Slots outside ``[0, S)`` are not written.
    """
    if t >= 0 and t < obs.shape[1]:
        if full != 0:
            obs[i, t, 0] = x
            obs[i, t, 1] = x_dot
            obs[i, t, 2] = theta
            obs[i, t, 3] = theta_dot
        else:
            obs[i, t, 0] = x
            obs[i, t, 1] = theta


@wp.kernel
def cartpole_reset(
    state: wp.array2d(dtype=Any),
    mask: wp.array(dtype=wp.int32),
    params: Any,
    episodes: Episodes,
    full: int,
    obs_root: wp.array3d(dtype=Any),
):
    """Reset the envs whose ``mask`` entry is nonzero; write every env's observation (slot 0)."""
    i = wp.tid()
    x, x_dot, theta, theta_dot = _load(state, i)
    if mask[i] != 0:
        x, x_dot, theta, theta_dot = _begin(state, params, episodes, i)
        _store(state, i, x, x_dot, theta, theta_dot)
    _observe(obs_root, i, 0, x, x_dot, theta, theta_dot, full)


@wp.func
def _advance(
    x: Any,
    x_dot: Any,
    theta: Any,
    theta_dot: Any,
    t: int,
    i: int,
    last: int,
    state: wp.array2d(dtype=Any),
    actions: wp.array2d(dtype=wp.int64),
    p: Any,
    episodes: Episodes,
    max_steps: int,
    reset_last: int,
    root_from: int,
    full: int,
    obs_root: wp.array3d(dtype=Any),
    obs_next: wp.array3d(dtype=Any),
    reward: wp.array2d(dtype=Any),
    terminated: wp.array2d(dtype=wp.bool),
    truncated: wp.array2d(dtype=wp.bool),
    done: wp.array2d(dtype=wp.bool),
):
    """Step ``t`` of env ``i`` from the given state: outputs, auto-reset, next root; new state."""
    x, x_dot, theta, theta_dot = _dynamics(x, x_dot, theta, theta_dot, _force(actions[i, t], p), p)
    term = _fell(x, theta, p)
    trunc = count_step(episodes.steps, i, max_steps)
    _observe(obs_next, i, t, x, x_dot, theta, theta_dot, full)
    reward[i, t] = reward.dtype(1.0)
    terminated[i, t] = term
    truncated[i, t] = trunc
    done[i, t] = term or trunc
    if (term or trunc) and (t < last or reset_last != 0):
        x, x_dot, theta, theta_dot = _begin(state, p, episodes, i)
    _observe(obs_root, i, t + 1 - root_from, x, x_dot, theta, theta_dot, full)
    return x, x_dot, theta, theta_dot


@wp.kernel
def cartpole_steps(
    state: wp.array2d(dtype=Any),
    actions: wp.array2d(dtype=wp.int64),
    params: Any,
    episodes: Episodes,
    max_steps: int,
    reset_last: int,
    root_from: int,
    full: int,
    obs_root: wp.array3d(dtype=Any),
    obs_next: wp.array3d(dtype=Any),
    reward: wp.array2d(dtype=Any),
    terminated: wp.array2d(dtype=wp.bool),
    truncated: wp.array2d(dtype=wp.bool),
    done: wp.array2d(dtype=wp.bool),
):
    """Run ``T = actions.shape[1]`` steps of every env, resetting the done ones in between.

    Step ``t`` applies ``actions[i, t]`` and writes slot ``t`` of the ``next`` outputs. A done env
    starts a new episode before the next step, and after the last one only if ``reset_last``.
    State ``t`` (the one step ``t`` starts from; state ``T`` is the final one) is observed into
    ``obs_root`` slot ``t - root_from`` if that slot exists.
    """
    i = wp.tid()
    last = actions.shape[1] - 1
    x, x_dot, theta, theta_dot = _load(state, i)
    _observe(obs_root, i, -root_from, x, x_dot, theta, theta_dot, full)
    for t in range(last + 1):
        x, x_dot, theta, theta_dot = _advance(
            x,
            x_dot,
            theta,
            theta_dot,
            t,
            i,
            last,
            state,
            actions,
            params,
            episodes,
            max_steps,
            reset_last,
            root_from,
            full,
            obs_root,
            obs_next,
            reward,
            terminated,
            truncated,
            done,
        )
    _store(state, i, x, x_dot, theta, theta_dot)


# A kernel lists its arguments: cartpole_step repeats cartpole_steps' signature and its call.
@wp.kernel
def cartpole_step(
    state: wp.array2d(dtype=Any),
    actions: wp.array2d(dtype=wp.int64),
    params: Any,
    episodes: Episodes,
    max_steps: int,
    reset_last: int,
    root_from: int,
    full: int,
    obs_root: wp.array3d(dtype=Any),
    obs_next: wp.array3d(dtype=Any),
    reward: wp.array2d(dtype=Any),
    terminated: wp.array2d(dtype=wp.bool),
    truncated: wp.array2d(dtype=wp.bool),
    done: wp.array2d(dtype=wp.bool),
):
    """:func:`cartpole_steps` for ``T = 1`` (the env's step and fused step), without the loop.

    The same :func:`_advance`, as straight-line code: a fused step of 1,024 envs takes 20.6 us
    instead of 24.8 us in the loop, whose state variables Warp cannot keep in registers
    (docs/benchmarks/envs.rst).
    """
    i = wp.tid()
    t = 0
    last = 0
    x, x_dot, theta, theta_dot = _load(state, i)
    _observe(obs_root, i, -root_from, x, x_dot, theta, theta_dot, full)
    x, x_dot, theta, theta_dot = _advance(
        x,
        x_dot,
        theta,
        theta_dot,
        t,
        i,
        last,
        state,
        actions,
        params,
        episodes,
        max_steps,
        reset_last,
        root_from,
        full,
        obs_root,
        obs_next,
        reward,
        terminated,
        truncated,
        done,
    )
    _store(state, i, x, x_dot, theta, theta_dot)
