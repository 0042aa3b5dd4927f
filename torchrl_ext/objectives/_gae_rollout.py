"""What one :class:`~torchrl_ext.objectives.RecurrentGAE` call reads from its input.

The rollout (reward, flags and ``is_init`` as ``[N, T, ...]`` rows) and the critic's inputs,
each entry checked as it is read, before anything is computed or written.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from torchrl_ext._checks import check_int
from torchrl_ext.objectives._gae import derive_is_init
from torchrl_ext.objectives._gae_checks import (
    check_bool_dtype,
    check_broadcast,
    check_floating_dtype,
    check_layer_input,
    check_per_step,
    check_same_step_layout,
    check_stored_state,
    check_time_name,
)
from torchrl_ext.objectives._gae_layout import flat_rows, next_key, per_step
from torchrl_ext.objectives._value_pass import ValuePass


@dataclasses.dataclass
class Rollout:
    """The GAE inputs of one call in canonical ``[N, T, ...]`` layout."""

    batch_shape: torch.Size
    time_dim: int
    reward: torch.Tensor  # [N, T, *feature]
    terminated: torch.Tensor  # [N, T, *flag_feature], bool
    done: torch.Tensor  # [N, T, *flag_feature], bool
    is_init: torch.Tensor | None  # [N, T], bool; None while still to be derived
    first_is_init: torch.Tensor | None  # [N], bool: a derived is_init's first column

    @property
    def layout(self) -> tuple[int, int]:
        """``(batch_ndim, time_dim)`` of the input, as :func:`flat_rows` takes them."""
        return len(self.batch_shape), self.time_dim

    @property
    def done_rows(self) -> torch.Tensor:
        """``[N, T]`` bool: whether any done flag of the step is set."""
        return per_step(self.done)

    @property
    def derives_is_init(self) -> bool:
        """Whether ``is_init`` was missing from the input, so it is derived and written."""
        return self.first_is_init is not None

    def ensure_is_init(self) -> torch.Tensor:
        """``is_init``, deriving it now if needed (``compute_gae`` derives it too, at no cost)."""
        if self.is_init is None:
            self.is_init = derive_is_init(self.done_rows, self.first_is_init)
        return self.is_init


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


def resolve_time_dim(td: TensorDictBase, time_dim: int | None, default: int | None) -> int:
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
    check_time_name(td, time_dim)
    return time_dim % batch_dims


def read_rollout(
    td: TensorDictBase,
    keys: Any,
    time_dim: int | None,
    default_time_dim: int | None,
    carry: torch.Tensor | None,
) -> Rollout:
    """Reads and checks the reward, flags and ``is_init`` of ``td`` as ``[N, T, ...]`` rows.

    Args:
        td (TensorDictBase): the input.
        keys (dataclass): the estimator's configured keys (``RecurrentGAE.tensor_keys``).
        time_dim (int, optional): the call's ``time_dim``.
        default_time_dim (int, optional): the module's ``time_dim``.
        carry (torch.Tensor, optional): bool ``[N]``, whether each env's last step of the
            previous call was ``done``; ``None`` before the first call.

    Raises:
        TypeError: for an entry of the wrong dtype or a ``time_dim`` that is not an int.
        ValueError: for a missing entry, a shape that does not fit or a ``time_dim`` out of
            range (see :func:`resolve_time_dim`).
    """
    tdim = resolve_time_dim(td, time_dim, default_time_dim)
    layout = (td.batch_dims, tdim)
    reward_key = next_key(keys.reward)
    reward = get_entry(td, reward_key, "reward", keys)
    check_floating_dtype(reward_key, reward)
    reward = flat_rows(reward, *layout)
    flags = {}
    for name in ("terminated", "done"):
        key = next_key(getattr(keys, name))
        flag = get_entry(td, key, name, keys)
        check_bool_dtype(key, flag)
        flag = flat_rows(flag, *layout)
        check_broadcast(key, flag, reward.shape[2:], reward_key)
        flags[name] = flag
    is_init, first_is_init = _read_is_init(td, keys.is_init, layout, flags["done"], carry)
    return Rollout(
        batch_shape=td.batch_size,
        time_dim=tdim,
        reward=reward,
        terminated=flags["terminated"],
        done=flags["done"],
        is_init=is_init,
        first_is_init=first_is_init,
    )


def _read_is_init(
    td: TensorDictBase,
    key: NestedKey,
    layout: tuple[int, int],
    done: torch.Tensor,
    carry: torch.Tensor | None,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(is_init, None)`` if given, else ``(None, first column to derive it with)``.

    Args:
        td (TensorDictBase): the input.
        key (NestedKey): the ``is_init`` key.
        layout (tuple of int): ``(batch_ndim, time_dim)`` of the input.
        done (torch.Tensor): the done rows ``[N, T, *f]``.
        carry (torch.Tensor, optional): the carry kept from the previous call, as in
            :func:`read_rollout`.

    Raises:
        ValueError: if the carry holds another number of envs than the input.
    """
    given = td.get(key, None)
    if given is not None:
        check_bool_dtype(key, given)
        check_per_step(key, given, td.batch_size)
        given = flat_rows(given, *layout)
        return per_step(given), None
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


def critic_rows(
    td: TensorDictBase, layout: tuple[int, int], value_pass: ValuePass, initial_state: str
) -> tuple[dict, dict]:
    """The value pass's inputs, checked, as ``[N * T, ...]`` rows.

    Returns ``({key: (obs, next obs)}, {stored state key: state})``, the states only in
    ``"stored"`` mode. Checked here is what the value pass joins and feeds to layers it
    calls directly.

    Errors raised by the critic's other modules on their inputs reach the caller as those
    modules raise them.

    Args:
        td (TensorDictBase): the input.
        layout (tuple of int): ``(batch_ndim, time_dim)`` of the input.
        value_pass (ValuePass): the critic's pass.
        initial_state (str): ``"zeros"`` or ``"stored"``.
    """
    inputs = {}
    for key in value_pass.obs_keys:
        obs = get_entry(td, key, "value_network input")
        final = get_entry(td, next_key(key), "value_network input")
        check_same_step_layout(key, obs, final, td.batch_dims)
        if key in value_pass.input_sizes:
            check_layer_input(key, obs, value_pass.input_sizes[key])
        inputs[key] = tuple(flat_rows(x, *layout).flatten(0, 1) for x in (obs, final))
    states = {}
    if initial_state == "stored":
        for key, shape in value_pass.state_shapes.items():
            state = get_entry(td, key, "stored recurrent state (initial_state='stored')")
            check_stored_state(key, state, td.batch_size, shape)
            states[key] = flat_rows(state, *layout).flatten(0, 1)
    return inputs, states
