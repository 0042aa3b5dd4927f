"""The kernels every env gets from its three Warp functions: masked reset and ``T`` steps.

An author writes the physics of one env as three ``wp.func`` functions (see
:class:`~torchrl_ext.envs.WarpEnv`):

* ``start(state, params, i, key)``: begin a new episode of env ``i``: write its state from the
  random stream ``key`` (a hash of ``(seed, i, episode)``);
* ``advance(state, params, actions, i, t, step)``: apply ``actions.<leaf>[i, t]`` to env ``i``,
  whose episode has run ``step`` steps; return ``(reward, terminated)``;
* ``observe(state, params, obs, i, t, step)``: write env ``i``'s observation into
  ``obs.<key>[i, t, ...]``; ``step`` counts the steps of its current episode.

:func:`make_kernels` closes the reset and stepping kernels over them. The stepping kernel owns
what every env repeats: it counts steps and truncates at the time limit, writes the reward into
every reward entry and the three done flags, starts a new episode where one ended (the fused
auto-reset) and observes the root state into the slot it belongs to. One step is this kernel
with ``T = 1``; the fused rollout is the same kernel with ``T`` steps.
"""

from __future__ import annotations

import functools
import zlib
from typing import Any, NamedTuple

import warp as wp

from torchrl_ext.envs._kernels.common import (
    Episodes,
    Flags,
    count_step,
    next_episode_key,
    set_flags,
)


class EnvKernels(NamedTuple):
    """The two kernels built around an env's functions."""

    reset: Any
    steps: Any


@functools.cache
def make_kernels(start: Any, advance: Any, observe: Any, module: str, name: str) -> EnvKernels:
    """The masked reset kernel and the ``T``-step kernel around an env's Warp functions.

    Built once per set of functions (kernels are compiled once per module and argument types).

    Args:
        start (wp.func): begins an episode (see the module docstring).
        advance (wp.func): one step of one env.
        observe (wp.func): writes one env's observation.
        module (str): the module the kernels belong to (the env's module).
        name (str): the stem of the kernels' names (the env's class name).

    Returns:
        ``reset(state, params, episodes, mask, root)`` begins a new episode in the envs whose
        ``mask`` entry is nonzero and observes every env into slot 0 of ``root``;
        ``steps(state, params, actions, episodes, max_steps, truncate_terminal, reset_last,
        root_from, root_slots, root, nxt, reward, flags)`` runs ``T = flags.done.shape[1]`` steps
        (a step that terminates at the time limit is truncated too only if
        ``truncate_terminal``): step ``t`` applies
        the actions of slot ``t`` and writes slot ``t`` of ``nxt``, ``reward`` (``[L, N, T]``,
        one row per reward entry) and the flags; a done env begins a new episode before the next
        step, and after the last one only if ``reset_last``; state ``t`` (state ``T`` is the
        final one) is observed into ``root`` slot ``t - root_from`` when ``0 <= t - root_from <
        root_slots``.
    """

    @wp.func
    def observe_slot(state: Any, params: Any, obs: Any, i: int, slot: int, slots: int, step: int):
        if slot >= 0 and slot < slots:
            observe(state, params, obs, i, slot, step)

    def reset(
        state: Any,
        params: Any,
        episodes: Episodes,
        mask: wp.array(dtype=wp.int32),
        root: Any,
    ):
        i = wp.tid()
        if mask[i] != 0:
            start(state, params, i, next_episode_key(episodes, i))
        observe(state, params, root, i, 0, episodes.steps[i])

    def steps(
        state: Any,
        params: Any,
        actions: Any,
        episodes: Episodes,
        max_steps: int,
        truncate_terminal: int,
        reset_last: int,
        root_from: int,
        root_slots: int,
        root: Any,
        nxt: Any,
        reward: wp.array3d(dtype=Any),
        flags: Flags,
    ):
        i = wp.tid()
        horizon = flags.done.shape[1]
        observe_slot(state, params, root, i, -root_from, root_slots, episodes.steps[i])
        for t in range(horizon):
            r, term = advance(state, params, actions, i, t, episodes.steps[i])
            trunc = count_step(episodes.steps, i, max_steps)
            if term and truncate_terminal == 0:
                trunc = False
            observe(state, params, nxt, i, t, episodes.steps[i])
            for k in range(reward.shape[0]):
                reward[k, i, t] = reward.dtype(r)
            set_flags(flags, i, t, term, trunc)
            if (term or trunc) and (t + 1 < horizon or reset_last != 0):
                start(state, params, i, next_episode_key(episodes, i))
            slot = t + 1 - root_from
            observe_slot(state, params, root, i, slot, root_slots, episodes.steps[i])

    return EnvKernels(
        wp.kernel(reset, name=f"{name}_reset", module=module),
        wp.kernel(steps, name=f"{name}_steps", module=module),
    )


def field_name(key: Any) -> str:
    """The struct field of a TensorDict key: nested keys joined with ``_``.

    Examples:
        >>> from torchrl_ext.envs._base.kernels import field_name
        >>> field_name("observation"), field_name(("speaker", "action"))
        ('observation', 'speaker_action')
    """
    return key if isinstance(key, str) else "_".join(key)


@functools.cache
def struct_type(module: str, stem: str, fields: tuple[tuple[str, Any, int], ...]) -> Any:
    """A ``@wp.struct`` of ``(name, Warp scalar type, ndim)`` fields, built once per layout.

    ``ndim = 0`` is a scalar field, else an array of that many dims. The struct's name carries
    a digest of the fields, so two layouts of one env class (float32 and float64, say) never
    share a name inside the kernels' module.
    """
    digest = zlib.crc32(repr([(n, t.__name__, d) for n, t, d in fields]).encode())
    annotations = {n: wp.array(dtype=t, ndim=d) if d else t for n, t, d in fields}
    body = {"__annotations__": annotations, "__module__": module}
    return wp.struct(type(f"{stem}_{digest:08x}", (), body))
