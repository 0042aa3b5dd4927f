"""What one :class:`~torchrl_ext.objectives.RecurrentGAE` call reads from its input and writes back.

GAE runs on canonical ``[N, T, *feature]`` rows (time second). :func:`read_rollout` reads every
entry a call needs, one reader per entry: the reward, the ``terminated`` and ``done`` flags,
``is_init``, then the values or the critic's inputs. Each reader checks its entry as it reads it
(dtype, per-step shape, a dim named ``"time"``) and moves it to rows, so that an error names the
entry and what would fix it before anything is computed or written. :meth:`Rollout.write` moves
the outputs back to the input's layout.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from torchrl_ext._checks import check_int
from torchrl_ext.objectives._gae import derive_is_init
from torchrl_ext.objectives._value_pass import ValuePass


def next_key(key: NestedKey) -> tuple[str, ...]:
    """Returns ``("next", *key)``.

    Args:
        key (NestedKey): a key of the current step.
    """
    return ("next", *key) if isinstance(key, tuple) else ("next", key)


# ------------------------------------------------------------------ what a call reads
@dataclasses.dataclass
class Rollout:
    """The entries one call reads, as ``[N, T, ...]`` rows, and the layout they came from."""

    batch_shape: torch.Size
    time_dim: int
    reward: torch.Tensor  # [N, T, *feature]
    terminated: torch.Tensor  # [N, T, *flag_feature], bool
    done: torch.Tensor  # [N, T, *flag_feature], bool
    is_init: torch.Tensor | None  # [N, T], bool; None while still to be derived
    first_is_init: torch.Tensor | None  # [N], bool: a derived is_init's first column
    # without a critic: the values read, [N, T, *value_feature]
    value: torch.Tensor | None = None
    next_value: torch.Tensor | None = None
    # with a critic: [N, T] bool, whether any done flag of the step is set; the critic's inputs
    # {key: (obs, next obs)} and, with initial_state="stored", its stored states {key: state},
    # as [N * T, ...] rows
    done_rows: torch.Tensor | None = None
    critic_inputs: dict = dataclasses.field(default_factory=dict)
    stored_states: dict = dataclasses.field(default_factory=dict)

    def write(
        self,
        td: TensorDictBase,
        keys: Any,
        advantage: torch.Tensor,
        value_target: torch.Tensor,
        values: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> None:
        """Writes a call's outputs into ``td``, in its layout.

        Args:
            td (TensorDictBase): the input the rows were read from.
            keys (dataclass): the estimator's configured keys (``RecurrentGAE.tensor_keys``).
            advantage (torch.Tensor): ``[N, T, *feature]``.
            value_target (torch.Tensor): ``[N, T, *feature]``.
            values (tuple of torch.Tensor, optional): ``(value, next_value)`` computed by the
                critic, written too; ``None`` when they were read from the input.

        ``is_init`` is written when it was derived (missing from the input).
        """
        td.set(keys.advantage, self._as_batch(advantage))
        td.set(keys.value_target, self._as_batch(value_target))
        if values is not None:
            td.set(keys.value, self._as_batch(values[0]))
            td.set(next_key(keys.value), self._as_batch(values[1]))
        if self.first_is_init is not None:
            td.set(keys.is_init, self._as_batch(self.is_init.unsqueeze(-1)))

    def _as_batch(self, y: torch.Tensor) -> torch.Tensor:
        """Inverse of :func:`_as_rows`: ``[N, T, *feature]`` -> ``[*batch, *feature]``."""
        batch_ndim, time_dim = len(self.batch_shape), self.time_dim
        if batch_ndim == 2 and time_dim == 1:
            return y
        moved = [s for i, s in enumerate(self.batch_shape) if i != time_dim]
        moved.append(self.batch_shape[time_dim])
        return y.reshape(*moved, *y.shape[2:]).movedim(batch_ndim - 1, time_dim)


def read_rollout(
    td: TensorDictBase,
    keys: Any,
    *,
    time_dim: int | None,
    default_time_dim: int | None,
    carry: torch.Tensor | None,
    critic: ValuePass | None,
    initial_state: str,
) -> Rollout:
    """Reads and checks every entry a call needs, as ``[N, T, ...]`` rows.

    In order: the time dim, the reward, ``terminated``, ``done``, ``is_init``, then the values
    (without a critic) or the critic's inputs and, in ``"stored"`` mode, its stored states. With
    a critic, a missing ``is_init`` is derived now (the critic resets its state there); without
    one it is left to the advantage step.

    Errors raised by the critic's other modules on their inputs reach the caller as those
    modules raise them; checked here is what the value pass joins and feeds to layers it calls
    directly.

    Args:
        td (TensorDictBase): the input.
        keys (dataclass): the estimator's configured keys (``RecurrentGAE.tensor_keys``).
        time_dim (int, optional): the call's ``time_dim``.
        default_time_dim (int, optional): the module's ``time_dim``.
        carry (torch.Tensor, optional): bool ``[N]``, whether each env's last step of the
            previous call was ``done``; ``None`` before the first call.
        critic (ValuePass, optional): the critic's pass; ``None`` to read the values.
        initial_state (str): ``"zeros"`` or ``"stored"``.

    Raises:
        TypeError: for an entry of the wrong dtype or a ``time_dim`` that is not an int.
        ValueError: for a missing entry, a shape that does not fit or a ``time_dim`` out of
            range (see :func:`_resolve_time_dim`).
    """
    tdim = _resolve_time_dim(td, time_dim, default_time_dim)
    layout = (td.batch_dims, tdim)
    reward = _read_reward(td, keys, layout)
    terminated = _read_flag(td, keys, "terminated", layout, reward.shape[2:])
    done = _read_flag(td, keys, "done", layout, reward.shape[2:])
    is_init, first_is_init = _read_is_init(td, keys.is_init, layout, done, carry)
    rollout = Rollout(
        batch_shape=td.batch_size,
        time_dim=tdim,
        reward=reward,
        terminated=terminated,
        done=done,
        is_init=is_init,
        first_is_init=first_is_init,
    )
    if critic is None:
        rollout.value = _read_value(td, keys, keys.value, layout)
        rollout.next_value = _read_value(td, keys, next_key(keys.value), layout)
        return rollout
    for key in critic.obs_keys:
        rollout.critic_inputs[key] = _read_critic_input(td, key, layout, critic.input_sizes)
    if initial_state == "stored":
        for key, shape in critic.state_shapes.items():
            rollout.stored_states[key] = _read_stored_state(td, key, layout, shape)
    rollout.done_rows = _any_in_step(done)
    if rollout.is_init is None:
        rollout.is_init = derive_is_init(rollout.done_rows, first_is_init)
    return rollout


def get_entry(td: TensorDictBase, key: NestedKey, role: str, keys: Any = None) -> torch.Tensor:
    """Returns the entry ``key`` of ``td``, raising a message that names its ``role`` if absent.

    Args:
        td (TensorDictBase): the input.
        key (NestedKey): the entry's key.
        role (str): what the entry is, for the message.
        keys (dataclass, optional): the caller's configurable keys; a ``role`` among their
            fields gets a ``set_keys`` hint. Defaults to ``None`` (no hint).

    Raises:
        ValueError: if the entry is missing.
    """
    value = td.get(key, None)
    if value is None:
        configurable = keys is not None and role in {f.name for f in dataclasses.fields(keys)}
        hint = f" Add it, or name another key with set_keys({role}=...)." if configurable else ""
        raise ValueError(
            f"RecurrentGAE needs the {role} entry {key!r}, which is missing from the input "
            f"tensordict (batch_size={tuple(td.batch_size)}).{hint}"
        )
    return value


def _resolve_time_dim(td: TensorDictBase, time_dim: int | None, default: int | None) -> int:
    """The time dim of ``td``'s batch dims, ``>= 0``.

    Args:
        td (TensorDictBase): the input.
        time_dim (int, optional): the call's ``time_dim``, checked here.
        default (int, optional): the module's ``time_dim``, used when the call gives none.
            When both are ``None``: the dim named ``"time"`` if any, else the last one.

    Raises:
        TypeError: if ``time_dim`` is not an int.
        ValueError: for an input without batch dims or with no element, a ``time_dim`` out of
            range or one that disagrees with a dim named ``"time"``.
    """
    batch_dims = td.batch_dims
    if batch_dims < 1:
        raise ValueError(
            "RecurrentGAE needs a tensordict with a time batch dim, got batch_size=()."
        )
    if time_dim is None:
        time_dim = default
    else:
        time_dim = check_int("time_dim", time_dim)
    if time_dim is None:
        names = td.names
        time_dim = names.index("time") if "time" in names else batch_dims - 1
    elif not -batch_dims <= time_dim < batch_dims:
        raise ValueError(
            f"time_dim={time_dim} is out of range for batch_size={tuple(td.batch_size)}."
        )
    if td.batch_size.numel() == 0:
        raise ValueError(f"RecurrentGAE got an empty rollout, batch_size={tuple(td.batch_size)}.")
    names = td.names
    if "time" in names and names.index("time") != time_dim % batch_dims:
        raise ValueError(
            f"time_dim={time_dim} disagrees with the tensordict's dim names {names}, which put "
            f"'time' at dim {names.index('time')}. Pass time_dim={names.index('time')}, or "
            "rename the dims."
        )
    return time_dim % batch_dims


# ------------------------------------------------------------------ one reader per entry
def _read_reward(td: TensorDictBase, keys: Any, layout: tuple[int, int]) -> torch.Tensor:
    """The floating-point reward ``("next", reward)`` as ``[N, T, *feature]`` rows."""
    key = next_key(keys.reward)
    reward = get_entry(td, key, "reward", keys)
    _check_floating_dtype(key, reward)
    return _as_rows(reward, *layout)


def _read_flag(
    td: TensorDictBase, keys: Any, name: str, layout: tuple[int, int], feature: torch.Size
) -> torch.Tensor:
    """The bool flag ``("next", name)`` as ``[N, T, *f]`` rows, ``f`` broadcasting to ``feature``.

    Args:
        td (TensorDictBase): the input.
        keys (dataclass): the estimator's configured keys.
        name (str): ``"terminated"`` or ``"done"``.
        layout (tuple of int): ``(batch_ndim, time_dim)`` of the input.
        feature (torch.Size): the reward's per-step shape.

    Raises:
        TypeError: if the flag is not bool.
        ValueError: if it is missing or its per-step shape does not broadcast to ``feature``.
    """
    key = next_key(getattr(keys, name))
    flag = get_entry(td, key, name, keys)
    check_bool_dtype(key, flag)
    flag = _as_rows(flag, *layout)
    if flag.shape[2:] == feature:
        return flag
    try:
        fits = torch.broadcast_shapes(flag.shape[2:], feature) == feature
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"{key!r} has per-step shape {tuple(flag.shape[2:])}, which does not broadcast to "
            f"the per-step shape {tuple(feature)} of {next_key(keys.reward)!r}."
        )
    return flag


def _read_is_init(
    td: TensorDictBase,
    key: NestedKey,
    layout: tuple[int, int],
    done: torch.Tensor,
    carry: torch.Tensor | None,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(is_init as [N, T] rows, None)`` if given, else ``(None, first column to derive with)``.

    Args:
        td (TensorDictBase): the input.
        key (NestedKey): the ``is_init`` key.
        layout (tuple of int): ``(batch_ndim, time_dim)`` of the input.
        done (torch.Tensor): the done rows ``[N, T, *f]``.
        carry (torch.Tensor, optional): the carry kept from the previous call, as in
            :func:`read_rollout`.

    Raises:
        TypeError: if ``is_init`` is not bool.
        ValueError: if it holds more than one flag per step, or if it is missing and the carry
            holds another number of envs than the input.
    """
    given = td.get(key, None)
    if given is not None:
        check_bool_dtype(key, given)
        batch_size = td.batch_size
        if given.shape[len(batch_size) :] not in ((), (1,)):
            raise ValueError(
                f"{key!r} must hold one flag per step, shape {(*batch_size,)} or "
                f"{(*batch_size, 1)}, got shape {tuple(given.shape)}."
            )
        return _any_in_step(_as_rows(given, *layout)), None
    n_rows = done.shape[0]
    if carry is None:
        carry = torch.ones(n_rows, dtype=torch.bool, device=done.device)
    elif carry.shape[0] != n_rows:
        raise ValueError(
            f"{key!r} is missing and must be derived, but the carry kept from the previous "
            f"call holds {carry.shape[0]} envs while this batch has {n_rows}. Pass {key!r} "
            "in the input or call reset_carry() when the set of envs changes."
        )
    return None, carry.to(done.device)


def _read_value(
    td: TensorDictBase, keys: Any, key: NestedKey, layout: tuple[int, int]
) -> torch.Tensor:
    """The floating-point value entry ``key`` as ``[N, T, *feature]`` rows."""
    value = get_entry(td, key, "value", keys)
    _check_floating_dtype(key, value)
    return _as_rows(value, *layout)


def _read_critic_input(
    td: TensorDictBase, key: NestedKey, layout: tuple[int, int], input_sizes: dict
) -> tuple[torch.Tensor, torch.Tensor]:
    """A critic input and its ``("next", ...)`` entry, joined by the value pass, as rows.

    Args:
        td (TensorDictBase): the input.
        key (NestedKey): the observation's key.
        layout (tuple of int): ``(batch_ndim, time_dim)`` of the input.
        input_sizes (dict): the ``input_size`` of each recurrent layer that reads an input
            directly, by the key it reads.

    Returns:
        ``(obs, next obs)``, each ``[N * T, *feature]``.

    Raises:
        TypeError: if the two dtypes differ, or if a recurrent layer reads the observation and
            it is not floating-point.
        ValueError: if either is missing, their per-step shapes differ, or the last dim is not
            the layer's ``input_size``.
    """
    obs = get_entry(td, key, "value_network input")
    final = get_entry(td, next_key(key), "value_network input")
    batch_dims = td.batch_dims
    if obs.dtype != final.dtype:
        raise TypeError(
            f"{key!r} has dtype={obs.dtype} but {next_key(key)!r} has dtype={final.dtype}; "
            "the critic reads both, so they must match."
        )
    if obs.shape[batch_dims:] != final.shape[batch_dims:]:
        raise ValueError(
            f"{key!r} has shape {tuple(obs.shape[batch_dims:])} per step but "
            f"{next_key(key)!r} has {tuple(final.shape[batch_dims:])}; the critic reads both, "
            "so they must match."
        )
    if key in input_sizes:
        input_size = input_sizes[key]
        _check_floating_dtype(key, obs)
        if obs.ndim == 0 or obs.shape[-1] != input_size:
            raise ValueError(
                f"{key!r} feeds the critic's recurrent layer, which has input_size={input_size}, "
                f"but its last dim is {tuple(obs.shape)[-1:]} (shape {tuple(obs.shape)})."
            )
    return _as_rows(obs, *layout).flatten(0, 1), _as_rows(final, *layout).flatten(0, 1)


def _read_stored_state(
    td: TensorDictBase, key: NestedKey, layout: tuple[int, int], state_shape: tuple[int, int]
) -> torch.Tensor:
    """A stored recurrent state, floating-point ``[*batch, num_layers, size]``, as rows.

    Args:
        td (TensorDictBase): the input.
        key (NestedKey): the stored state's key.
        layout (tuple of int): ``(batch_ndim, time_dim)`` of the input.
        state_shape (tuple of int): ``(num_layers, size)`` of the critic's layer.

    Returns:
        ``[N * T, num_layers, size]``.

    Raises:
        TypeError: if the state is not floating-point.
        ValueError: if it is missing or has any other shape.
    """
    state = get_entry(td, key, "stored recurrent state (initial_state='stored')")
    _check_floating_dtype(key, state)
    expected = (*td.batch_size, *state_shape)
    if state.shape != expected:
        raise ValueError(
            f"stored recurrent state {key!r} has shape {tuple(state.shape)}, but the critic's "
            f"layer expects {expected} ([*batch, num_layers, size]). Store the states the "
            "critic's recurrent module produces, or use initial_state='zeros'."
        )
    return _as_rows(state, *layout).flatten(0, 1)


# ------------------------------------------------------------------ checks and layout
def check_bool_dtype(key: NestedKey, flag: torch.Tensor) -> None:
    """Raises :class:`TypeError` unless ``flag``, the entry ``key``, is a bool tensor."""
    if flag.dtype is not torch.bool:
        raise TypeError(
            f"{key!r} must be a bool tensor, got dtype={flag.dtype}. Convert it with .bool()."
        )


def _check_floating_dtype(key: NestedKey, x: torch.Tensor) -> None:
    """Raises :class:`TypeError` unless ``x``, the entry ``key``, is a floating-point tensor."""
    if not x.is_floating_point():
        raise TypeError(f"{key!r} must be a floating-point tensor, got dtype={x.dtype}.")


def raise_on_nonfinite(
    keys: Any, reward: torch.Tensor, value: torch.Tensor, next_value: torch.Tensor
) -> None:
    """Raises naming the GAE inputs holding NaN (else infinite) values, if any do.

    Called when GAE saw a non-finite number; finite inputs whose result overflowed do not
    raise (as in a plain loop, the overflow shows in the output).

    Args:
        keys (dataclass): the estimator's configured keys.
        reward (torch.Tensor): the reward rows.
        value (torch.Tensor): the value rows.
        next_value (torch.Tensor): the next value rows.

    Raises:
        ValueError: if an input holds a NaN or infinite value.
    """
    inputs = {next_key(keys.reward): reward, keys.value: value, next_key(keys.value): next_value}
    found = [key for key, x in inputs.items() if bool(torch.isnan(x).any())]
    if found:
        raise ValueError(f"RecurrentGAE got NaN values in {found}; nothing was written.")
    found = [key for key, x in inputs.items() if bool(torch.isinf(x).any())]
    if found:
        raise ValueError(f"RecurrentGAE got infinite values in {found}; nothing was written.")


def _as_rows(x: torch.Tensor, batch_ndim: int, time_dim: int) -> torch.Tensor:
    """Views ``x`` (``[*batch, *feature]``) as ``[N, T, *feature]`` with time second.

    Args:
        x (torch.Tensor): an entry of the input, batch dims first.
        batch_ndim (int): the input's number of batch dims.
        time_dim (int): the time dim among them, ``>= 0``.
    """
    if batch_ndim == 2 and time_dim == 1:
        return x  # already [N, T, *feature] (the common case, kept free of view overhead)
    x = x.movedim(time_dim, batch_ndim - 1)
    return x.reshape(-1, *x.shape[batch_ndim - 1 :])


def _any_in_step(flag: torch.Tensor) -> torch.Tensor:
    """``[N, T, *f]`` bool -> ``[N, T]``: whether any entry of the step is set (a view if one).

    Args:
        flag (torch.Tensor): bool rows ``[N, T, *f]``.
    """
    flat = flag.reshape(*flag.shape[:2], -1)
    return flat[..., 0] if flat.shape[-1] == 1 else flat.any(-1)
