"""Warp functions shared by every env kernel: random streams, episode bookkeeping, structs.

Random numbers in kernels never come from a stateful generator. Every draw is a pure function of
``(seed, env_index, episode[, step, role], draw_index)`` computed by a chain of 32-bit avalanche
mixers (MurmurHash3's finalizer). The 64-bit seed enters as two 32-bit words, so seeds that agree
modulo ``2**32`` still give unrelated streams. A stream is named by its 32-bit ``key``
(:func:`stream_key` for an episode, :func:`step_key` for one step of it); an env numbers its
draws from a key itself (:func:`uniform64`, :func:`uniform_range`, :func:`uniform_int`,
:func:`gaussian_pair`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import warp as wp

_M1 = wp.constant(wp.uint32(0x85EBCA6B))
_M2 = wp.constant(wp.uint32(0xC2B2AE35))
_GOLDEN = wp.constant(wp.uint32(0x9E3779B9))
_SHIFT16 = wp.constant(wp.uint32(16))
_SHIFT13 = wp.constant(wp.uint32(13))
_STEP_SALT = wp.constant(wp.uint32(0x7F4A7C15))
_TWO_PI = wp.constant(wp.float64(6.283185307179586))


@wp.func
def fmix32(h: wp.uint32) -> wp.uint32:
    """Avalanche the bits of ``h`` (MurmurHash3 finalizer)."""
    h = h ^ (h >> _SHIFT16)
    h = h * _M1
    h = h ^ (h >> _SHIFT13)
    h = h * _M2
    h = h ^ (h >> _SHIFT16)
    return h


@wp.func
def stream_key(seed: wp.array(dtype=wp.uint32), env: int, episode: int) -> wp.uint32:
    """Key of the random stream of one episode of one env: a hash of ``(seed, env, episode)``."""
    h = fmix32(seed[0] ^ _GOLDEN)
    h = fmix32(h ^ seed[1])
    h = fmix32(h ^ wp.uint32(env))
    h = fmix32(h ^ wp.uint32(episode))
    return h


@wp.func
def step_key(key: wp.uint32, step: int, role: int) -> wp.uint32:
    """Key of the stream of step ``step`` of the episode whose stream is ``key``.

    ``role`` tells apart the streams of one step (the base gives ``advance`` role 0 and
    ``observe`` role 1), so two functions of one step never share a draw.
    """
    return fmix32(key ^ fmix32(wp.uint32(2 * step + role) + _STEP_SALT))


@wp.func
def uniform64(key: wp.uint32, draw: int) -> wp.float64:
    """The ``draw``-th uniform double in ``[0, 1)`` of the stream ``key`` (53 random bits)."""
    a = fmix32(key ^ fmix32(wp.uint32(2 * draw) + _GOLDEN))
    b = fmix32(key ^ fmix32(wp.uint32(2 * draw + 1) + _GOLDEN))
    hi = wp.float64(a >> wp.uint32(5))
    lo = wp.float64(b >> wp.uint32(6))
    return (hi * wp.float64(67108864.0) + lo) * wp.float64(1.1102230246251565e-16)


@wp.func
def uniform_range(key: wp.uint32, draw: int, low: wp.float64, high: wp.float64) -> wp.float64:
    """The ``draw``-th uniform double in ``[low, high)`` of the stream ``key``."""
    return low + (high - low) * uniform64(key, draw)


@wp.func
def uniform_int(key: wp.uint32, draw: int, n: int) -> int:
    """The ``draw``-th draw of the stream ``key`` as an int uniform in ``[0, n)``."""
    return wp.min(int(uniform64(key, draw) * wp.float64(n)), n - 1)


@wp.func
def gaussian_pair(key: wp.uint32, draw: int):
    """Two independent standard normal doubles from draws ``draw`` and ``draw + 1`` (Box-Muller)."""
    u1 = uniform64(key, draw)
    u2 = uniform64(key, draw + 1)
    radius = wp.sqrt(wp.float64(-2.0) * wp.log(wp.float64(1.0) - u1))
    return radius * wp.cos(_TWO_PI * u2), radius * wp.sin(_TWO_PI * u2)


@wp.struct
class Episodes:
    """Per-env episode bookkeeping, passed to kernels as one argument.

    ``seed`` holds the two 32-bit words of the env's seed; ``steps`` and ``episode`` count the
    steps of the current episode and the episodes begun, per env.
    """

    seed: wp.array(dtype=wp.uint32)
    steps: wp.array(dtype=wp.int32)
    episode: wp.array(dtype=wp.int32)


@wp.struct
class Flags:
    """The ``[N, T]`` done flags a stepping kernel writes, passed to it as one argument."""

    terminated: wp.array2d(dtype=wp.bool)
    truncated: wp.array2d(dtype=wp.bool)
    done: wp.array2d(dtype=wp.bool)


@wp.func
def set_flags(flags: Flags, i: int, t: int, terminated: bool, truncated: bool):
    """Write step ``t`` of env ``i``: ``terminated``, ``truncated`` and their ``or``, ``done``."""
    flags.terminated[i, t] = terminated
    flags.truncated[i, t] = truncated
    flags.done[i, t] = terminated or truncated


@wp.func
def count_step(steps: wp.array(dtype=wp.int32), i: int, max_steps: int) -> bool:
    """Advance env ``i``'s step counter, up to ``max_steps``; return whether the limit truncates it.

    A finished episode stepped on without a reset keeps counting ``max_steps``, a state that loads.
    """
    n = wp.min(steps[i] + 1, max_steps)
    steps[i] = n
    return n >= max_steps


@wp.func
def begin_episode(
    steps: wp.array(dtype=wp.int32), episode: wp.array(dtype=wp.int32), i: int
) -> int:
    """Start a new episode for env ``i``; return the index of the episode that starts."""
    e = episode[i]
    episode[i] = e + 1
    steps[i] = 0
    return e


@wp.func
def current_episode_key(episodes: Episodes, i: int) -> wp.uint32:
    """The random stream's key of env ``i``'s current episode (the last one begun)."""
    return stream_key(episodes.seed, i, episodes.episode[i] - 1)


@wp.func
def next_episode_key(episodes: Episodes, i: int) -> wp.uint32:
    """Begin env ``i``'s next episode (:func:`begin_episode`); return its random stream's key."""
    return stream_key(episodes.seed, i, begin_episode(episodes.steps, episodes.episode, i))


def array_struct(name: str, fields: Mapping[str, Any], module: str) -> Any:
    """A ``@wp.struct`` named ``name`` with one field per entry of ``fields``, read by name.

    A Warp scalar type stands for an ``[N]`` array of it; an array type or a struct is kept.

    Args:
        name (str): the struct's name.
        fields (Mapping[str, Any]): field name to Warp scalar, array type or struct.
        module (str): the module of the kernels that take it (pass ``__name__``).
    """
    types = {key: wp.array(dtype=t) if isinstance(t, type) else t for key, t in fields.items()}
    return wp.struct(type(name, (), {"__annotations__": types, "__module__": module}))


def make_struct(struct_type: Any, /, **fields: Any) -> Any:
    """An instance of the ``@wp.struct`` ``struct_type`` with every field set by name.

    Args:
        struct_type: a ``@wp.struct`` type.
        **fields: a value for every field of ``struct_type``, by field name.

    Returns:
        The struct instance, passed to kernels by value.

    Raises:
        ValueError: unless ``fields`` names exactly the fields of ``struct_type``, naming the
            missing and unexpected ones.

    Examples:
        >>> import warp as wp
        >>> from torchrl_ext.envs._kernels.common import make_struct, param_structs
        >>> pair = param_structs("Pair", ("first", "second"), __name__)[wp.float64]
        >>> p = make_struct(pair, second=0.5, first=2.0)
        >>> p.first, p.second
        (2.0, 0.5)
    """
    names = struct_type.vars
    if fields.keys() != names.keys():
        missing = [name for name in names if name not in fields]
        extra = sorted(set(fields) - set(names))
        raise ValueError(
            f"fields must name exactly the fields of {struct_type.key} {list(names)}; "
            f"missing={missing}, unexpected={extra}."
        )
    instance = struct_type()
    for name, value in fields.items():
        setattr(instance, name, value)
    return instance


def pack_params(structs: Mapping[Any, type], values: Mapping[str, float], dtype: Any) -> Any:
    """Fill the struct of ``dtype`` from :func:`param_structs` with ``values``, field by name.

    Each Python float is rounded once to ``dtype``, so float64 constants are exactly the doubles
    a NumPy reference computes with.

    Args:
        structs (Mapping): the ``{wp.float32: ..., wp.float64: ...}`` structs of
            :func:`param_structs`.
        values (Mapping[str, float]): a value for every field, by field name.
        dtype (torch.dtype): ``torch.float32`` or ``torch.float64``.

    Returns:
        A struct instance, passed to kernels by value.

    Raises:
        ValueError: unless ``values`` names exactly the struct's fields.

    Examples:
        >>> import torch
        >>> from torchrl_ext.envs._kernels.common import pack_params, param_structs
        >>> structs = param_structs("Demo", ("mass", "dt"), __name__)
        >>> p = pack_params(structs, {"dt": 0.1, "mass": 2.0}, torch.float64)
        >>> p.mass, p.dt
        (2.0, 0.1)
    """
    struct = structs[wp.float64 if dtype == torch.float64 else wp.float32]
    return make_struct(struct, **{name: float(value) for name, value in values.items()})


def param_structs(name: str, names: Sequence[str], module: str) -> dict[Any, type]:
    """One ``@wp.struct`` per float dtype (``wp.float32``, ``wp.float64``), a field per name.

    Kernels take the struct by value (``params: Any``) and read ``params.<name>``, so a constant
    is found by its name, never by its position in a list; :func:`pack_params` fills one.

    Args:
        name (str): stem of the struct names (``<name>32``, ``<name>64``).
        names (sequence of str): the field names.
        module (str): the module of the kernels that take it (pass ``__name__``).

    Returns:
        ``{wp.float32: struct, wp.float64: struct}``.
    """
    structs = {}
    for scalar in (wp.float32, wp.float64):
        suffix = "32" if scalar is wp.float32 else "64"
        body = {"__annotations__": dict.fromkeys(names, scalar), "__module__": module}
        structs[scalar] = wp.struct(type(f"{name}{suffix}", (), body))
    return structs
