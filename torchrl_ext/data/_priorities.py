"""Per-anchor priorities for windows of records.

A window's records share one priority, the one of the anchor the sampler drew: these helpers
reduce per-record priorities (TD errors) to one value per anchor, refusing values a sum tree
must never hold.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import is_tensor_collection


def reduce_window_priorities(
    sample: Any,
    priority: torch.Tensor,
    window: int,
    reduction: str,
    eta: float,
    learning_only: bool,
) -> tuple[torch.Tensor | tuple[torch.Tensor, ...], torch.Tensor]:
    """Reduces per-record priorities to one value per distinct anchor.

    Records enter a window's reduction when ``"validity_mask"`` marks them (and, with
    ``learning_only``, ``"learning_mask"`` too). A sample without ``"learning_mask"`` reduces
    over its valid records; one without either mask over all records, as torchrl's own unit
    does. Priorities of the records that enter must be finite and ``>= 0``; any other value is
    refused before anything is returned, so the sampler's sum tree never sees it.

    Args:
        sample (TensorDict or dict): holds ``"anchor_index"`` per record (and optionally
            ``"validity_mask"`` and ``"learning_mask"``), windows laid out one after the other.
        priority (torch.Tensor): one priority per record.
        window (int): records per window.
        reduction (str): ``"max"``, ``"mean"`` or ``"mixture"``.
        eta (float): weight of the max in ``"mixture"``.
        learning_only (bool): reduce over learning records only.

    Returns:
        ``(anchors, priorities)``: anchors as a ``[n]`` tensor (1-D storages) or a tuple of
        coordinate tensors, and their reduced priorities.
    """
    anchor = _get(sample, "anchor_index")
    priority = _as_priority(priority)
    records = _record_count(sample, anchor)
    if priority.numel() != records:
        raise ValueError(
            f"priority must hold one value per record ({records}), got a tensor of shape "
            f"{tuple(priority.shape)}."
        )
    if records % window:
        raise ValueError(f"the sample holds {records} records, not a multiple of {window}.")
    rows = records // window
    mask = _record_mask(sample, records, learning_only).reshape(rows, window)
    values = priority.reshape(rows, window).to(torch.float64)
    _check_priorities(values, mask)
    per_window = _reduce_rows(values, mask, reduction, eta)
    anchor = anchor.reshape(rows, window, -1)[:, 0]
    return _dedupe(
        anchor, per_window.to(priority.dtype if priority.is_floating_point() else torch.float)
    )


def priority_to_write(buffer: Any, sample: Any, priority: torch.Tensor | None) -> Any:
    """The per-record priorities of ``sample`` that ``Sequence.update_priority`` writes.

    Args:
        buffer (ReplayBuffer): the buffer they are written to.
        sample (TensorDict or dict): the sample (or its info) they belong to.
        priority (torch.Tensor, optional): one priority per record, returned as it is when
            given. Defaults to the sample's ``buffer.priority_key`` entry.

    Raises:
        TypeError: if ``buffer`` has no ``update_priority`` method.
        ValueError: if ``priority`` is not given and the sample has no entry under the
            buffer's priority key.
    """
    if not callable(getattr(buffer, "update_priority", None)):
        raise TypeError(
            f"buffer must be a replay buffer with an update_priority method, got "
            f"buffer={type(buffer).__name__}."
        )
    if priority is None:
        key = getattr(buffer, "priority_key", "td_error")
        priority = sample.get(key, None)
        if priority is None:
            raise ValueError(
                f"the sample has no {key!r} entry (the buffer's priority key); set it, "
                "or pass priority= with one value per record."
            )
    return priority


def _as_priority(priority: Any) -> torch.Tensor:
    if isinstance(priority, torch.Tensor):
        tensor = priority
    else:
        try:
            tensor = torch.as_tensor(priority)
        except (TypeError, ValueError, RuntimeError) as err:
            raise TypeError(
                f"priority must be a tensor of numbers, got priority={priority!r}."
            ) from err
    if tensor.dtype is torch.bool or tensor.is_complex():
        raise TypeError(f"priority must hold real numbers, got priority.dtype={tensor.dtype}.")
    return tensor.detach()


def _record_mask(sample: Any, records: int, learning_only: bool) -> torch.Tensor:
    """The records each window's reduction reads (see :func:`reduce_window_priorities`)."""
    valid = _find(sample, "validity_mask")
    mask = torch.ones(records, dtype=torch.bool) if valid is None else valid.reshape(-1)
    learning = _find(sample, "learning_mask") if learning_only else None
    if learning is not None:
        mask = mask & learning.reshape(-1)
    if mask.numel() != records:
        raise ValueError(
            f"the sample's masks hold {mask.numel()} records, its validity_mask {records}."
        )
    return mask


def _record_count(sample: Any, anchor: torch.Tensor) -> int:
    """Records in a sample: its validity mask's, its batch's, or its anchors' count."""
    valid = _find(sample, "validity_mask")
    if valid is not None:
        return valid.numel()
    if is_tensor_collection(sample):
        return sample.numel()
    return anchor.numel() if anchor.ndim <= 1 else anchor.shape[:-1].numel()


def _check_priorities(values: torch.Tensor, mask: torch.Tensor) -> None:
    """Refuses NaN, infinite or negative priorities among the records that are reduced."""
    bad = mask & ~(torch.isfinite(values) & (values >= 0))
    if bool(bad.any()):
        row, col = (int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"priorities must be finite and >= 0, got {values[row, col].item()!r} for record "
            f"{col} of window {row} (priority[{row * values.shape[1] + col}] of the flat "
            "sample). Check the TD errors for NaN or inf before updating priorities."
        )


def _reduce_rows(values: torch.Tensor, mask: torch.Tensor, reduction: str, eta: float):
    count = mask.sum(1).clamp(min=1)
    mean = torch.where(mask, values, 0.0).sum(1) / count
    if reduction == "mean":
        return mean
    peak = torch.where(mask, values, -torch.inf).amax(1)
    if reduction == "max":
        return peak
    return eta * peak + (1.0 - eta) * mean


def _dedupe(anchor: torch.Tensor, value: torch.Tensor):
    """Keeps the largest priority of an anchor drawn in several windows."""
    unique, inverse = torch.unique(anchor, dim=0, return_inverse=True)
    reduced = torch.full((unique.shape[0],), -torch.inf, dtype=value.dtype, device=value.device)
    reduced.scatter_reduce_(0, inverse.to(value.device), value, reduce="amax")
    if unique.shape[1] == 1:
        return unique[:, 0], reduced
    return tuple(unique.unbind(1)), reduced


def _find(sample: Any, key: str) -> torch.Tensor | None:
    value = sample.get(key, None)
    return None if value is None else torch.as_tensor(value)


def _get(sample: Any, key: str) -> torch.Tensor:
    value = _find(sample, key)
    if value is None:
        raise ValueError(
            f"the sample has no {key!r} entry; pass a sample (or its info) produced by a "
            "Sequence sample unit."
        )
    return value
