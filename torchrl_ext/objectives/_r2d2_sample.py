"""The ``[B, T]`` window sample :class:`~torchrl_ext.objectives.R2D2Loss` reads, read and checked.

:func:`read_window` reads the per-record inputs (a :class:`Window`), refusing missing keys, wrong
shapes and dtypes; :func:`check_values` refuses values that would corrupt the loss, with one host
read for all checks.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey, unravel_key


@dataclasses.dataclass
class Window:
    """The per-record inputs of one call, ``[B, T]``, read and checked before anything runs."""

    action: torch.Tensor  # [B, T] int64 index, or [B, T, A] one-hot
    reward: torch.Tensor  # [B, T]
    done: torch.Tensor  # [B, T] bool
    terminated: torch.Tensor  # [B, T] bool
    is_init: torch.Tensor  # [B, T] bool
    valid: torch.Tensor  # [B, T] bool
    learning: torch.Tensor  # [B, T] bool
    weight: torch.Tensor | None  # [B, 1] or [B, T]


def next_key(key: NestedKey) -> NestedKey:
    """``("next", *key)``, unravelled.

    Args:
        key (NestedKey): a key of the record.
    """
    return unravel_key(("next", key))


# -- reading a sample --------------------------------------------------------------------------


def read_window(
    tensordict: TensorDictBase, burn_in: int, keys: Any, in_keys: list[NestedKey]
) -> Window:
    """Reads the per-record inputs and refuses samples the loss cannot handle.

    Args:
        tensordict (TensorDictBase): the ``[B, T]`` sample.
        burn_in (int): the loss's burn-in records per window.
        keys (dataclass): the loss's configured keys (``R2D2Loss.tensor_keys``).
        in_keys (list of NestedKey): every key the loss reads (``R2D2Loss.in_keys``).

    Raises:
        TypeError: if ``tensordict`` is not a TensorDict, or a reward, action or importance
            weight is not a real number.
        ValueError: if the sample is not ``[B, T]``, leaves no learning record after
            ``burn_in``, lacks a key, or an entry has the wrong shape (a flag, the wrong dtype).
    """
    if not isinstance(tensordict, TensorDictBase):
        raise TypeError(f"tensordict must be a TensorDict sample, got {type(tensordict).__name__}.")
    if tensordict.ndim != 2:
        raise ValueError(
            "tensordict must be a [B, T] window sample (Sequence(..., layout='batch_time')), "
            f"got batch shape {tuple(tensordict.shape)}."
        )
    size = tensordict.shape[1]
    if burn_in >= size:
        raise ValueError(
            f"burn_in={burn_in} leaves no learning record in windows of T={size} "
            "records; burn_in must match the sample unit's burn_in."
        )
    check_keys(tensordict, in_keys)
    window = Window(
        action=read_action(tensordict, keys),
        reward=per_record(tensordict, next_key(keys.reward), float_ok=True),
        done=per_record(tensordict, next_key(keys.done)),
        terminated=per_record(tensordict, next_key(keys.terminated)),
        is_init=per_record(tensordict, keys.is_init),
        valid=per_record(tensordict, keys.validity_mask),
        learning=per_record(tensordict, keys.learning_mask),
        weight=read_weights(tensordict, keys),
    )
    return window


def check_keys(tensordict: TensorDictBase, in_keys: list[NestedKey]) -> None:
    """Raises unless the sample holds every key in ``in_keys``.

    Args:
        tensordict (TensorDictBase): the sample.
        in_keys (list of NestedKey): the keys the loss reads.
    """
    present = set(tensordict.keys(True, True))
    for key in in_keys:
        if unravel_key(key) not in present:
            raise ValueError(
                f"the sample has no {key!r} entry, which R2D2Loss reads; store it with the "
                "records (observations need their ('next', ...) counterpart, recurrent "
                "states the actor's state before each record) or rename it with set_keys."
            )


def per_record(tensordict: TensorDictBase, key: NestedKey, float_ok: bool = False):
    """The entry ``key`` as one value per record, ``[B, T]``: a bool flag, or real numbers.

    Args:
        tensordict (TensorDictBase): the sample.
        key (NestedKey): the entry, ``[B, T]`` or ``[B, T, 1]``.
        float_ok (bool, optional): read real numbers instead of a bool flag. Defaults to
            ``False``.
    """
    value = tensordict.get(key)
    shape = tuple(tensordict.shape)
    if value.shape[-1:] == (1,) and value.ndim == 3:
        value = value.squeeze(-1)
    if tuple(value.shape) != shape:
        raise ValueError(
            f"{key!r} must hold one value per record, shaped [B, T] or [B, T, 1] = "
            f"{list(shape)}, got {tuple(value.shape)}."
        )
    if not float_ok and value.dtype is not torch.bool:
        raise ValueError(f"{key!r} must be a bool flag, got dtype {value.dtype}.")
    if float_ok:
        _check_real(key, value)
    return value


def read_action(tensordict: TensorDictBase, keys: Any) -> torch.Tensor:
    """The actions taken: an index ``[B, T]`` or ``[B, T, 1]``, or one-hot ``[B, T, A]``.

    Args:
        tensordict (TensorDictBase): the sample.
        keys (dataclass): the loss's configured keys.
    """
    action = tensordict.get(keys.action)
    if action.is_complex():
        raise TypeError(f"{keys.action!r} must be real, got dtype {action.dtype}.")
    if tuple(action.shape[:2]) != tuple(tensordict.shape) or action.ndim > 3:
        raise ValueError(
            f"{keys.action!r} must be an action index [B, T] or [B, T, 1], or "
            f"one-hot [B, T, A], with [B, T] = {list(tensordict.shape)}; got "
            f"{tuple(action.shape)}."
        )
    return action


def read_weights(tensordict: TensorDictBase, keys: Any) -> torch.Tensor | None:
    """Importance weights ``[B]`` or ``[B, T]`` (checked to be one per window later).

    Args:
        tensordict (TensorDictBase): the sample.
        keys (dataclass): the loss's configured keys.
    """
    key = keys.priority_weight
    weight = tensordict.get(key, None)
    if weight is None:
        return None
    _check_real(key, weight)
    batch, size = tensordict.shape
    if tuple(weight.shape) not in ((batch,), (batch, size), (batch, size, 1)):
        raise ValueError(
            f"{key!r} must hold one importance weight per window, shaped [B], [B, T] or "
            f"[B, T, 1] with [B, T] = [{batch}, {size}], got {tuple(weight.shape)}."
        )
    return weight.reshape(batch, -1)


def _check_real(key: NestedKey, value: torch.Tensor) -> None:
    """Raises :class:`TypeError` unless ``value``, the entry ``key``, holds real numbers."""
    if value.dtype is torch.bool or value.is_complex():
        raise TypeError(f"{key!r} must hold real numbers, got dtype {value.dtype}.")


# -- checking values (one host read for all checks) --------------------------------------------


def check_values(window: Window, num_actions: int, burn_in: int, n_step: int, keys: Any) -> None:
    """Refuses samples that would corrupt the loss, reading one flag per check at once.

    Each check is a 0-d bool tensor computed where the sample lives; they are read back
    together (one device sync on CUDA), and only a failed check reads more to say where.

    Args:
        window (Window): the sample's per-record inputs.
        num_actions (int): the number of action values the network gives.
        burn_in (int): the loss's burn-in records per window.
        n_step (int): the loss's return horizon.
        keys (dataclass): the loss's configured keys.

    Raises:
        ValueError: if the sample does not match ``burn_in`` or ``n_step``, its learning and
            bootstrap records cross an episode start, a reward the targets sum or an importance
            weight is not finite (or a weight is negative, or not one per window), or an action
            is not a whole number in ``[0, A)`` (or not one-hot).
    """
    checks = [
        *_geometry_checks(window, burn_in, n_step),
        _episode_check(window, burn_in),
        reward_check(window, burn_in, keys),
        *_weight_checks(window, keys),
        *action_checks(window.action[:, burn_in:], num_actions, keys),
    ]
    checks = [check for check in checks if check is not None]
    failed = torch.stack([bad for bad, _ in checks]).tolist()
    for (_, refuse), bad in zip(checks, failed, strict=True):
        if bad:
            refuse()


def _geometry_checks(window: Window, burn_in: int, n_step: int) -> list:
    """The learning region starts at ``burn_in`` and is followed by ``n_step - 1`` records."""
    learning = window.learning
    columns = torch.arange(learning.shape[1], device=learning.device)
    bootstrap = learning.shape[1] - 1 - torch.where(learning, columns, -1).amax()

    def bad_start():
        raise ValueError(
            f"burn_in={burn_in} does not match the sample: its learning_mask does not start "
            "at column burn_in. Pass the sample unit's burn_in."
        )

    def too_short():
        raise ValueError(
            f"n_step={n_step} needs n_step - 1 = {n_step - 1} bootstrap records "
            f"after the learning region, the sample has {int(bootstrap)}. Build the unit "
            f"with Sequence(..., bootstrap={n_step - 1})."
        )

    starts_wrong = learning[:, :burn_in].any() | ~learning[:, burn_in].all()
    return [(starts_wrong, bad_start), (bootstrap < n_step - 1, too_short)]


def _episode_check(window: Window, burn_in: int) -> tuple:
    """Learning and bootstrap records must not cross an episode start."""
    after = slice(burn_in + 1, None)
    crossing = window.is_init[:, after] & window.valid[:, after]
    rest = slice(burn_in, None)
    done, valid = window.done[:, rest], window.valid[:, rest]
    crossing = crossing | (done[:, :-1] & valid[:, 1:])

    def refuse():
        raise ValueError(
            "the learning and bootstrap records of a window must stay in one episode "
            "(Sequence(..., episode_boundary='pad' or 'stop')); this sample has a valid "
            f"record after an episode start or end past column burn_in={burn_in}."
        )

    return crossing.any(), refuse


def reward_check(window: Window, burn_in: int, keys: Any) -> tuple:
    """Rewards a target can sum (valid records after burn-in) must be finite."""
    rest = slice(burn_in, None)
    bad = window.valid[:, rest] & ~torch.isfinite(window.reward[:, rest])
    key = next_key(keys.reward)
    return bad.any(), lambda: refuse_at(
        key, window.reward[:, rest], bad, burn_in, "be finite on valid records"
    )


def _weight_checks(window: Window, keys: Any) -> list:
    """Importance weights: finite, ``>= 0``, the same over each window's records."""
    weight = window.weight
    if weight is None:
        return []
    key = keys.priority_weight
    bad = ~(torch.isfinite(weight) & (weight >= 0))

    def not_one_per_window():
        raise ValueError(
            f"{key!r} must hold one importance weight per window; a [B, T] entry must be "
            "the same over each window's records (as Sequence repeats the sampler's)."
        )

    varies = (weight != weight[:, :1]).any()
    return [
        (bad.any(), lambda: refuse_at(key, weight, bad, 0, "be finite and >= 0")),
        (varies, not_one_per_window),
    ]


def action_checks(action: torch.Tensor, num_actions: int, keys) -> list:
    """Index actions are whole numbers in ``[0, A)``; one-hot actions hold one 1 per record."""
    key = keys.action
    if _is_one_hot(action, num_actions):
        ones = action != 0
        bad = (ones & (action != 1)).any(-1) | (ones.sum(-1) != 1)
        return [(bad.any(), lambda: refuse_at(key, action, bad, 0, "be one-hot"))]
    if action.ndim == 3 and action.shape[-1] != 1:
        raise ValueError(
            f"{key!r} has {action.shape[-1]} entries per record but the network gives "
            f"{num_actions} action values; pass an index [B, T] or one-hot [B, T, A]."
        )
    index = action.reshape(action.shape[:2])
    checks = []
    if index.is_floating_point():
        fractional = ~torch.isfinite(index) | (index != index.round())
        checks.append(
            (fractional.any(), lambda: refuse_at(key, index, fractional, 0, "be whole numbers"))
        )
    outside = (index < 0) | (index >= num_actions)
    rule = f"lie in [0, {num_actions})"
    checks.append((outside.any(), lambda: refuse_at(key, index, outside, 0, rule)))
    return checks


def _is_one_hot(action: torch.Tensor, num_actions: int) -> bool:
    """Whether ``action`` ``[B, L, ...]`` is one-hot over ``num_actions`` (else an index)."""
    return action.ndim == 3 and action.shape[-1] == num_actions and num_actions > 1


def refuse_at(key: NestedKey, values: torch.Tensor, bad: torch.Tensor, offset: int, rule: str):
    """Raises naming ``key``, the first bad value and where it sits (record ``offset + t``)."""
    row, col = (int(i) for i in bad.nonzero()[0])
    value = values[row, col]
    value = value.tolist() if value.ndim else value.item()
    raise ValueError(f"{key!r} must {rule}, got {value!r} in window {row}, record {offset + col}.")
