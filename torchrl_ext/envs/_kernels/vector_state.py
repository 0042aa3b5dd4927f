"""The reset and stepping kernels of every env whose state is one ``[N, D]`` float array.

An env's kernel module writes its physics once, as ``wp.func``s on the state of one env held as a
``wp.vector``, and :func:`make_kernels` closes the two kernels over them:

* ``reset_box(p)``: the float64 vectors ``(low, high)``; a new episode starts from a state drawn
  uniformly in ``[low, high)`` from its ``(seed, env, episode)`` stream, component ``c`` by the
  stream's draw ``c``;
* ``dynamics(s, action, p)``: one step from ``s`` under ``action``; returns ``(new state,
  reward, terminated)`` (the reward is cast to the reward dtype);
* ``observe(obs, i, t, s, obs_mode)``: write the observation of ``s`` into ``obs[i, t]``;
  ``obs_mode`` is the env's own choice of observation (the cart-pole's: with velocities or not).

Constants arrive by value as one ``@wp.struct`` of the state dtype (``p``), so the compiler
keeps them in registers. The step and the fused step run the ``T``-step kernel with ``T = 1``
on ``[N, 1]`` views of the step buffers: a loop-free copy of it for ``T = 1`` launches the fused
step of 1,024 cart-poles in 22-23 us on the CPU against 26 us, a 14 % saving, below the 25 % a
second compiled path must save here (docs/benchmarks/envs.rst).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import warp as wp

from torchrl_ext.envs._kernels.common import (
    Episodes,
    Flags,
    count_step,
    next_episode_key,
    set_flags,
    uniform_range,
)


@wp.func
def _pack2(a: Any, b: Any, c: Any, d: Any):
    return wp.vector(a, b)


@wp.func
def _pack4(a: Any, b: Any, c: Any, d: Any):
    return wp.vector(a, b, c, d)


#: The state of ``size`` components from the four scalars the ``T``-step loop carries.
_PACKS = {2: _pack2, 4: _pack4}


class VectorKernels(NamedTuple):
    """An env's state size, constants structs (``param_structs``) and its two kernels."""

    size: int
    params: dict
    reset: Any
    steps: Any


def make_kernels(
    size: int, params: dict, reset_box: Any, dynamics: Any, observe: Any, module: str
) -> VectorKernels:
    """The masked reset kernel and the ``T``-step kernel of an env with the given physics.

    Args:
        size (int): ``D``, the length of one env's state: 2 or 4.
        params (dict): the env's constants structs, from ``param_structs``.
        reset_box (wp.func): the box new episodes start in (see the module docstring).
        dynamics (wp.func): one step.
        observe (wp.func): the observation of a state.
        module (str): the module the kernels belong to (pass ``__name__``).

    Returns:
        The kernels, with ``size`` and ``params``. ``reset(state, mask, params, episodes, obs_mode,
        obs_root)`` begins a new episode in the envs whose ``mask`` entry is nonzero and observes
        every env into slot 0. ``steps(state, actions, params, episodes, max_steps, reset_last,
        root_from, obs_mode, obs_root, obs_next, reward, flags)`` runs ``T = actions.shape[1]``
        steps: step ``t`` applies ``actions[i, t]`` and writes slot ``t`` of the ``next``
        outputs; a done env begins a new episode before the next step, and after the last one
        only if ``reset_last``; state ``t`` (the one step ``t`` starts from; state ``T`` is the
        final one) is observed into ``obs_root`` slot ``t - root_from`` if that slot exists.

    Raises:
        ValueError: for another ``size``.
    """
    if size not in _PACKS:
        raise ValueError(f"size must be 2 or 4, got size={size!r}.")

    # the T-step loop carries the state as four scalars, padded: a loop-carried wp.vector costs
    # a third more time per step on the CPU
    @wp.func
    def unpack(s: Any):
        return s[0], s[1], s[wp.static(size - 2)], s[wp.static(size - 1)]

    pack = _PACKS[size]

    @wp.func
    def load(state: wp.array2d(dtype=Any), i: int):
        s = wp.vector(length=size, dtype=state.dtype)
        for c in range(size):
            s[c] = state[i, c]
        return s

    @wp.func
    def begin(state: wp.array2d(dtype=Any), p: Any, episodes: Episodes, i: int):
        key = next_episode_key(episodes, i)
        low, high = reset_box(p)
        s = wp.vector(length=size, dtype=state.dtype)
        for c in range(size):
            s[c] = state.dtype(uniform_range(key, c, low[c], high[c]))
        return s

    @wp.func
    def store(state: wp.array2d(dtype=Any), i: int, s: Any):
        for c in range(size):
            state[i, c] = s[c]

    @wp.func
    def observe_slot(obs: wp.array3d(dtype=Any), i: int, t: int, s: Any, obs_mode: int):
        if t >= 0 and t < obs.shape[1]:
            observe(obs, i, t, s, obs_mode)

    def reset(
        state: wp.array2d(dtype=Any),
        mask: wp.array(dtype=wp.int32),
        params: Any,
        episodes: Episodes,
        obs_mode: int,
        obs_root: wp.array3d(dtype=Any),
    ):
        i = wp.tid()
        s = load(state, i)
        if mask[i] != 0:
            s = begin(state, params, episodes, i)
            store(state, i, s)
        observe_slot(obs_root, i, 0, s, obs_mode)

    def steps(
        state: wp.array2d(dtype=Any),
        actions: wp.array2d(dtype=Any),
        params: Any,
        episodes: Episodes,
        max_steps: int,
        reset_last: int,
        root_from: int,
        obs_mode: int,
        obs_root: wp.array3d(dtype=Any),
        obs_next: wp.array3d(dtype=Any),
        reward: wp.array2d(dtype=Any),
        flags: Flags,
    ):
        i = wp.tid()
        horizon = actions.shape[1]
        a, b, c, d = unpack(load(state, i))
        observe_slot(obs_root, i, -root_from, pack(a, b, c, d), obs_mode)
        for t in range(horizon):
            s, r, term = dynamics(pack(a, b, c, d), actions[i, t], params)
            trunc = count_step(episodes.steps, i, max_steps)
            observe_slot(obs_next, i, t, s, obs_mode)
            reward[i, t] = reward.dtype(r)
            set_flags(flags, i, t, term, trunc)
            a, b, c, d = unpack(s)
            if (term or trunc) and (t + 1 < horizon or reset_last != 0):
                a, b, c, d = unpack(begin(state, params, episodes, i))
            observe_slot(obs_root, i, t + 1 - root_from, pack(a, b, c, d), obs_mode)
        store(state, i, pack(a, b, c, d))

    stem = module.rsplit(".", 1)[-1]
    return VectorKernels(
        size,
        params,
        wp.kernel(reset, name=f"{stem}_reset", module=module),
        wp.kernel(steps, name=f"{stem}_steps", module=module),
    )
