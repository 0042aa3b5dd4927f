r"""The kernels every env gets from its three Warp functions: masked reset and ``T`` steps.

An author writes the physics of one env as three ``wp.func`` functions (see
:class:`~torchrl_ext.envs.WarpEnv`), each about env ``i`` alone:

* ``start(state, params, i, key)``: begin a new episode of env ``i``: write its state from the
  random stream ``key`` of ``(seed, i, episode)``;
* ``advance(state, params, actions, i, step, key) -> (reward, terminated)``: apply
  ``actions.<leaf>[i]`` to env ``i``, whose episode has run ``step`` steps; ``key`` is the
  random stream of that step;
* ``observe(state, params, obs, i, step, key)``: write env ``i``'s observation into
  ``obs.<key>[i, ...]``; ``step`` counts the steps of its current episode and ``key`` is the
  random stream of the observation after that many steps.

The functions see one step of one env: ``actions`` and ``obs`` hold per-env arrays
(``[N, ...]``), which the generated kernels fill from, and copy into, the slot of the ``[N, T]``
buffers each step belongs to (:func:`make_copy`). :func:`make_kernels` closes the reset and
stepping kernels over them. The stepping kernel owns what every env repeats: it counts steps
and truncates at the time limit, derives the keys, writes the reward into every reward entry and
the three done flags, starts a new episode where one ended (the fused auto-reset) and places
every output in its time slot. One step is this kernel with ``T = 1``; the fused rollout is the
same kernel with ``T`` steps.
"""

from __future__ import annotations

import functools
import linecache
import zlib
from typing import Any, NamedTuple

import warp as wp

from torchrl_ext.envs._kernels.common import (
    Episodes,
    Flags,
    current_episode_key,
    next_episode_key,
    set_flags,
    step_key,
)

#: Trailing dims (after ``[N, T]``) a generated copy handles.
_MAX_TRAILING = 3
#: The roles of a step's two random streams (:func:`step_key`).
_ADVANCE, _OBSERVE = 0, 1


class EnvKernels(NamedTuple):
    """The two kernels built around an env's functions."""

    reset: Any
    steps: Any


def _copy_source(name: str, fields: tuple[tuple[str, tuple[int, ...]], ...], into: bool) -> str:
    """Python source of ``name(src, dst, i, t)`` between per-env arrays and time slot ``t``.

    ``into``: ``dst.<f>[i, t, ...] = src.<f>[i, ...]`` (an output placed in its slot); else
    ``dst.<f>[i, ...] = src.<f>[i, t, ...]`` (an action taken from its slot). The trailing sizes
    are constants of the source, so Warp unrolls the short loops.
    """
    lines = [f"def {name}(src: Any, dst: Any, i: int, t: int):"]
    for field, sizes in fields:
        index = "".join(f", c{d}" for d in range(len(sizes)))
        slot, flat = f"[i, t{index}]", f"[i{index}]"
        indent = "    "
        for d, size in enumerate(sizes):
            lines.append(f"{indent}for c{d} in range({size}):")
            indent += "    "
        dst, src = (slot, flat) if into else (flat, slot)
        lines.append(f"{indent}dst.{field}{dst} = src.{field}{src}")
    if not fields:
        lines.append("    pass")
    return "\n".join(lines) + "\n"


@functools.cache
def make_copy(module: str, fields: tuple[tuple[str, tuple[int, ...]], ...], into: bool) -> Any:
    """A ``wp.func`` copying one env's entries between per-env arrays and a time slot.

    Args:
        module (str): the module it belongs to (the env's module).
        fields (tuple): ``(field name, trailing sizes)`` of every array (``[N, *sizes]`` per
            env, ``[N, T, *sizes]`` in the slotted struct).
        into (bool): ``True``: ``place_outputs(src, dst, i, t)`` writes
            ``dst.<f>[i, t] = src.<f>[i]``; ``False``: ``take_actions(src, dst, i, t)`` writes
            ``dst.<f>[i] = src.<f>[i, t]`` (for every trailing index).

    Raises:
        ValueError: for a field name that is not an identifier, or too many trailing dims.
    """
    for name, sizes in fields:
        if not name.isidentifier() or len(sizes) > _MAX_TRAILING:
            raise ValueError(
                f"entry {name!r} of shape {sizes} per env cannot be a struct field: a key must "
                f"be an identifier, with at most {_MAX_TRAILING} dims per env."
            )
    name = "place_outputs" if into else "take_actions"
    source = _copy_source(name, fields, into)
    filename = f"<torchrl_ext {name} {zlib.crc32(source.encode()):08x}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"Any": Any, "__name__": module}
    exec(compile(source, filename, "exec"), namespace)  # our own generated source, compiled by Warp
    return wp.func(namespace[name])


@functools.cache
def make_kernels(
    start: Any,
    advance: Any,
    observe: Any,
    take: Any,
    place: Any,
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
        take (wp.func): copies one env's actions of a slot into the per-env actions
            (:func:`make_copy`, ``into=False``).
        place (wp.func): copies one env's per-env observation into a slot (``into=True``).
        module (str): the module the kernels belong to (the env's module).
        name (str): the stem of the kernels' names (the env's class name).
        rewards (int): the number of reward entries, ``L`` (a constant of the kernel: an
            unrolled loop writes them).
        per_entry (bool, optional): whether ``advance`` returns a vector of ``L`` rewards, entry
            ``k`` for reward entry ``k``, instead of one reward for all. Defaults to ``False``.

    Returns:
        ``reset(state, params, episodes, mask, obs, root)`` begins a new episode in the envs
        whose ``mask`` entry is nonzero and observes every env into slot 0 of ``root``;
        ``steps(state, params, actions, episodes, max_steps, truncate_terminal, last_step,
        reset_last, root_slots, act, obs, root, nxt, reward, flags)`` runs
        ``T = flags.done.shape[1]`` steps: step ``t`` applies the actions of slot ``t`` and
        writes slot ``t`` of ``nxt``, ``reward`` (``[L, N, T]``, one row per reward entry) and
        the flags (a step that terminates at the time limit is truncated too only if
        ``truncate_terminal``); the step count stops at ``last_step`` (an episode stepped on
        past its end without a reset, as TorchRL's plain ``step`` does, counts no further); a done
        env begins a new episode before the next step, and after the last one only if
        ``reset_last``; the state before step ``t`` is observed into ``root`` slot ``t`` and the
        final state into slot ``T`` when those slots exist (``root_slots`` of them; with
        ``reset_last`` the slots start after the first step). ``act`` and ``obs`` are the
        per-env arrays the functions see.
    """

    @wp.func
    def in_slots(slot: int, slots: int) -> bool:
        return slot >= 0 and slot < slots

    @wp.func
    def observe_into(
        state: Any, params: Any, obs: Any, out: Any, i: int, slot: int, step: int, key: wp.uint32
    ):
        observe(state, params, obs, i, step, step_key(key, step, _OBSERVE))
        place(obs, out, i, slot)

    def reset(
        state: Any,
        params: Any,
        episodes: Episodes,
        mask: wp.array(dtype=wp.int32),
        obs: Any,
        root: Any,
    ):
        i = wp.tid()
        key = current_episode_key(episodes, i)
        if mask[i] != 0:
            key = next_episode_key(episodes, i)
            start(state, params, i, key)
        observe_into(state, params, obs, root, i, 0, episodes.steps[i], key)

    def steps(
        state: Any,
        params: Any,
        actions: Any,
        episodes: Episodes,
        max_steps: int,
        truncate_terminal: int,
        last_step: int,
        reset_last: int,
        root_slots: int,
        act: Any,
        obs: Any,
        root: Any,
        nxt: Any,
        reward: wp.array3d(dtype=Any),
        flags: Flags,
    ):
        i = wp.tid()
        horizon = flags.done.shape[1]
        shift = reset_last  # the fused step's root holds the state after its step
        step = episodes.steps[i]
        key = current_episode_key(episodes, i)
        if in_slots(-shift, root_slots):
            observe_into(state, params, obs, root, i, 0, step, key)
        t = wp.int32(0)
        while t < horizon:  # not range(): Warp's CPU code for a dynamic range() is slower
            take(actions, act, i, t)
            r, term = advance(state, params, act, i, step, step_key(key, step, _ADVANCE))
            step = wp.min(step + 1, last_step)  # a finished episode stepped on stays there
            episodes.steps[i] = step
            trunc = step >= max_steps
            if term and truncate_terminal == 0:
                trunc = False
            observe_into(state, params, obs, nxt, i, t, step, key)
            for k in range(wp.static(rewards)):
                if wp.static(per_entry):
                    reward[k, i, t] = reward.dtype(r[k])
                else:
                    reward[k, i, t] = reward.dtype(r)
            set_flags(flags, i, t, term, trunc)
            slot = t + 1 - shift
            if (term or trunc) and (t + 1 < horizon or reset_last != 0):
                key = next_episode_key(episodes, i)
                start(state, params, i, key)
                step = 0
                if in_slots(slot, root_slots):
                    observe_into(state, params, obs, root, i, slot, step, key)
            elif in_slots(slot, root_slots):
                place(obs, root, i, slot)
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
