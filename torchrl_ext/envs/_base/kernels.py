r"""The kernels every env gets from its three Warp functions: masked reset and ``T`` steps.

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

Where an env did not reset, its root observation is the observation it was just given under
``"next"``: the kernel copies it (:func:`make_copy`) instead of observing the same state again,
which matters when observing costs more than copying (trigonometry, noise, large boards).
"""

from __future__ import annotations

import functools
import linecache
import zlib
from typing import Any, NamedTuple

import warp as wp

from torchrl_ext.envs._kernels.common import Episodes, Flags, next_episode_key, set_flags

#: Trailing dims (after ``[N, T]``) a generated observation copy handles.
_MAX_TRAILING = 3


class EnvKernels(NamedTuple):
    """The two kernels built around an env's functions."""

    reset: Any
    steps: Any


def _copy_source(fields: tuple[tuple[str, tuple[int, ...]], ...]) -> str:
    """Python source of ``copy(src, dst, i, ts, td)``: every field's slot ``ts`` to ``td``.

    The trailing sizes are constants of the source, so Warp unrolls the short loops.
    """
    lines = ["def copy_observation(src: Any, dst: Any, i: int, ts: int, td: int):"]
    for name, sizes in fields:
        index = "".join(f", c{d}" for d in range(len(sizes)))
        indent = "    "
        for d, size in enumerate(sizes):
            lines.append(f"{indent}for c{d} in range({size}):")
            indent += "    "
        lines.append(f"{indent}dst.{name}[i, td{index}] = src.{name}[i, ts{index}]")
    return "\n".join(lines) + "\n"


@functools.cache
def make_copy(module: str, fields: tuple[tuple[str, tuple[int, ...]], ...]) -> Any:
    """A ``wp.func`` copying one env's time slot between two observation structs.

    Args:
        module (str): the module it belongs to (the env's module).
        fields (tuple): ``(field name, trailing sizes)`` of every observation array
            (``[N, T, *sizes]`` in the kernels).

    Returns:
        ``copy_observation(src, dst, i, ts, td)``, writing ``dst.<f>[i, td] = src.<f>[i, ts]``
        for every field (and every trailing index).

    Raises:
        ValueError: for a field name that is not an identifier, or too many trailing dims.
    """
    for name, sizes in fields:
        if not name.isidentifier() or len(sizes) > _MAX_TRAILING:
            raise ValueError(
                f"observation entry {name!r} of shape {sizes} per env cannot be a struct field: "
                f"a key must be an identifier, with at most {_MAX_TRAILING} dims per env."
            )
    source = _copy_source(fields)
    filename = f"<torchrl_ext copy {zlib.crc32(source.encode()):08x}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"Any": Any, "__name__": module}
    exec(compile(source, filename, "exec"), namespace)  # our own generated source, compiled by Warp
    return wp.func(namespace["copy_observation"])


@functools.cache
def make_kernels(
    start: Any,
    advance: Any,
    observe: Any,
    copy: Any,
    module: str,
    name: str,
    rewards: int,
    per_entry: bool = False,
) -> EnvKernels:
    """The masked reset kernel and the ``T``-step kernel around an env's Warp functions.

    Built once per set of functions (kernels are compiled once per module and argument types).

    Args:
        start (wp.func): begins an episode (see the module docstring).
        advance (wp.func): one step of one env.
        observe (wp.func): writes one env's observation.
        copy (wp.func): copies one env's observation slot (:func:`make_copy`).
        module (str): the module the kernels belong to (the env's module).
        name (str): the stem of the kernels' names (the env's class name).
        rewards (int): the number of reward entries, ``L`` (a constant of the kernel: an
            unrolled loop writes them).
        per_entry (bool, optional): whether ``advance`` returns a vector of ``L`` rewards, entry
            ``k`` for reward entry ``k``, instead of one reward for all. Defaults to ``False``.

    Returns:
        ``reset(state, params, episodes, mask, root)`` begins a new episode in the envs whose
        ``mask`` entry is nonzero and observes every env into slot 0 of ``root``;
        ``steps(state, params, actions, episodes, max_steps, truncate_terminal, last_step,
        reset_last, root_from, root_slots, root, nxt, reward, flags)`` runs
        ``T = flags.done.shape[1]`` steps: step ``t`` applies the actions of slot ``t`` and
        writes slot ``t`` of ``nxt``, ``reward`` (``[L, N, T]``, one row per reward entry) and
        the flags (a step that terminates at the time limit is truncated too only if
        ``truncate_terminal``); the step count stops at ``last_step`` (an episode stepped on
        past its end without a reset, as TorchRL's plain ``step`` does, counts no further); a done
        env begins a new episode before the next step, and after the last one only if
        ``reset_last``; state ``t`` (state ``T`` is the final one) goes to ``root`` slot
        ``t - root_from`` when ``0 <= t - root_from < root_slots``.
    """

    @wp.func
    def in_slots(slot: int, slots: int) -> bool:
        return slot >= 0 and slot < slots

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
        last_step: int,
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
        step = episodes.steps[i]
        if in_slots(-root_from, root_slots):
            observe(state, params, root, i, -root_from, step)
        t = wp.int32(0)
        while t < horizon:  # not range(): Warp's CPU code for a dynamic range() is slower
            r, term = advance(state, params, actions, i, t, step)
            step = wp.min(step + 1, last_step)  # a finished episode stepped on stays there
            episodes.steps[i] = step
            trunc = step >= max_steps
            if term and truncate_terminal == 0:
                trunc = False
            observe(state, params, nxt, i, t, step)
            for k in range(wp.static(rewards)):
                if wp.static(per_entry):
                    reward[k, i, t] = reward.dtype(r[k])
                else:
                    reward[k, i, t] = reward.dtype(r)
            set_flags(flags, i, t, term, trunc)
            slot = t + 1 - root_from
            if (term or trunc) and (t + 1 < horizon or reset_last != 0):
                start(state, params, i, next_episode_key(episodes, i))
                step = 0
                if in_slots(slot, root_slots):
                    observe(state, params, root, i, slot, step)
            elif in_slots(slot, root_slots):
                copy(nxt, root, i, t, slot)
            t += 1

    return EnvKernels(
        wp.kernel(reset, name=f"{name}_reset", module=module),
        wp.kernel(steps, name=f"{name}_steps{rewards}{'v' if per_entry else ''}", module=module),
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
