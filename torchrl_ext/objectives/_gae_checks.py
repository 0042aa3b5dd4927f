"""Checks of the entries :class:`~torchrl_ext.objectives.RecurrentGAE` reads.

Dtypes, per-step shapes, stored recurrent states, a ``"time"`` dim name and finite values; each
error names the entry and what would fix it.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from torchrl_ext.objectives._gae_layout import next_key


def check_bool_dtype(key: NestedKey, flag: torch.Tensor) -> None:
    """Raises :class:`TypeError` unless ``flag``, the entry ``key``, is a bool tensor."""
    if flag.dtype is not torch.bool:
        raise TypeError(
            f"{key!r} must be a bool tensor, got dtype={flag.dtype}. Convert it with .bool()."
        )


def check_floating_dtype(key: NestedKey, x: torch.Tensor) -> None:
    """Raises :class:`TypeError` unless ``x``, the entry ``key``, is a floating-point tensor."""
    if not x.is_floating_point():
        raise TypeError(f"{key!r} must be a floating-point tensor, got dtype={x.dtype}.")


def check_broadcast(key: NestedKey, flag: torch.Tensor, feature: torch.Size, ref: NestedKey):
    """Raises unless the per-step shape of ``flag`` (``[N, T, *f]``) broadcasts to ``feature``.

    Args:
        key (NestedKey): the flag's key, for the message.
        flag (torch.Tensor): the flag's rows ``[N, T, *f]``.
        feature (torch.Size): the per-step shape it must broadcast to.
        ref (NestedKey): the key of the entry with that shape, for the message.

    Raises:
        ValueError: if it does not broadcast.
    """
    if flag.shape[2:] == feature:
        return
    try:
        ok = torch.broadcast_shapes(flag.shape[2:], feature) == feature
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(
            f"{key!r} has per-step shape {tuple(flag.shape[2:])}, which does not broadcast to "
            f"the per-step shape {tuple(feature)} of {ref!r}."
        )


def check_per_step(key: NestedKey, flag: torch.Tensor, batch_size: torch.Size) -> None:
    """Raises unless ``flag`` holds one value per step: ``[*batch]`` or ``[*batch, 1]``.

    Args:
        key (NestedKey): the flag's key, for the message.
        flag (torch.Tensor): the flag.
        batch_size (torch.Size): the input's batch shape.

    Raises:
        ValueError: for any other shape.
    """
    if flag.shape[len(batch_size) :] in ((), (1,)):
        return
    raise ValueError(
        f"{key!r} must hold one flag per step, shape {(*batch_size,)} or {(*batch_size, 1)}, "
        f"got shape {tuple(flag.shape)}."
    )


def check_same_step_layout(
    key: NestedKey, obs: torch.Tensor, final: torch.Tensor, batch_dims: int
) -> None:
    """Raises unless ``obs`` and its ``("next", ...)`` entry agree per step (they are joined).

    Args:
        key (NestedKey): the observation's key.
        obs (torch.Tensor): the observation.
        final (torch.Tensor): its ``("next", ...)`` entry.
        batch_dims (int): the input's number of batch dims.

    Raises:
        TypeError: if their dtypes differ.
        ValueError: if their per-step shapes differ.
    """
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


def check_layer_input(key: NestedKey, obs: torch.Tensor, input_size: int) -> None:
    """Raises unless ``obs`` fits the recurrent layer that reads it directly.

    Args:
        key (NestedKey): the observation's key.
        obs (torch.Tensor): the observation.
        input_size (int): the layer's ``input_size``.

    Raises:
        TypeError: if ``obs`` is not floating-point.
        ValueError: if its last dim is not ``input_size``.
    """
    check_floating_dtype(key, obs)
    if obs.ndim == 0 or obs.shape[-1] != input_size:
        raise ValueError(
            f"{key!r} feeds the critic's recurrent layer, which has input_size={input_size}, "
            f"but its last dim is {tuple(obs.shape)[-1:]} (shape {tuple(obs.shape)})."
        )


def check_stored_state(
    key: NestedKey, state: torch.Tensor, batch_size: torch.Size, per_step: tuple[int, int]
) -> None:
    """Raises unless ``state`` is floating-point ``[*batch, num_layers, size]``.

    Args:
        key (NestedKey): the stored state's key.
        state (torch.Tensor): the stored state.
        batch_size (torch.Size): the input's batch shape.
        per_step (tuple of int): ``(num_layers, size)`` of the critic's layer.

    Raises:
        TypeError: if ``state`` is not floating-point.
        ValueError: for any other shape.
    """
    check_floating_dtype(key, state)
    expected = (*batch_size, *per_step)
    if state.shape != expected:
        raise ValueError(
            f"stored recurrent state {key!r} has shape {tuple(state.shape)}, but the critic's "
            f"layer expects {expected} ([*batch, num_layers, size]). Store the states the "
            "critic's recurrent module produces, or use initial_state='zeros'."
        )


def check_time_name(td: TensorDictBase, time_dim: int) -> None:
    """Raises if ``td`` names a dim ``"time"`` and ``time_dim`` is another one.

    Args:
        td (TensorDictBase): the input.
        time_dim (int): the time dim asked for.

    Raises:
        ValueError: if they disagree.
    """
    names = td.names
    if "time" in names and names.index("time") != time_dim % td.batch_dims:
        raise ValueError(
            f"time_dim={time_dim} disagrees with the tensordict's dim names {names}, which put "
            f"'time' at dim {names.index('time')}. Pass time_dim={names.index('time')}, or "
            "rename the dims."
        )


def raise_on_nonfinite(inputs: dict[NestedKey, torch.Tensor]) -> None:
    """Raises naming the inputs holding NaN (else infinite) values, if any do.

    Called when GAE saw a non-finite number; finite inputs whose result overflowed do not
    raise (as in a plain loop, the overflow shows in the output).

    Args:
        inputs (dict): the GAE inputs by key.

    Raises:
        ValueError: if an input holds a NaN or infinite value.
    """
    found = [key for key, x in inputs.items() if bool(torch.isnan(x).any())]
    if found:
        raise ValueError(f"RecurrentGAE got NaN values in {found}; nothing was written.")
    found = [key for key, x in inputs.items() if bool(torch.isinf(x).any())]
    if found:
        raise ValueError(f"RecurrentGAE got infinite values in {found}; nothing was written.")
