"""Per-anchor priorities for windows of records.

A window's records share one priority, the one of the anchor the sampler drew. These helpers
reduce per-record priorities (TD errors) to anchors, and plug that reduction into torchrl's
prioritized TensorDict buffers so that ``update_tensordict_priority(sample)`` uses it.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import is_tensor_collection

_NEEDED = ("anchor_index", "validity_mask", "learning_mask")


def reduce_window_priorities(
    sample: Any,
    priority: torch.Tensor,
    window: int,
    reduction: str,
    eta: float,
    learning_only: bool,
) -> tuple[torch.Tensor | tuple[torch.Tensor, ...], torch.Tensor]:
    """Reduces per-record priorities to one value per distinct anchor.

    Args:
        sample (TensorDict or dict): holds ``"anchor_index"``, ``"validity_mask"`` and
            ``"learning_mask"`` per record, windows laid out one after the other.
        priority (torch.Tensor): one priority per record.
        window (int): records per window.
        reduction (str): ``"max"``, ``"mean"`` or ``"mixture"``.
        eta (float): weight of the max in ``"mixture"``.
        learning_only (bool): reduce over learning records only.

    Returns:
        ``(anchors, priorities)``: anchors as a ``[n]`` tensor (1-D storages) or a tuple of
        coordinate tensors, and their reduced priorities.
    """
    anchor, valid, learning = (_get(sample, key) for key in _NEEDED)
    priority = torch.as_tensor(priority)
    records = valid.numel()
    if priority.numel() != records:
        raise ValueError(
            f"priority must hold one value per record ({records}), got a tensor of shape "
            f"{tuple(priority.shape)}."
        )
    if records % window:
        raise ValueError(f"the sample holds {records} records, not a multiple of {window}.")
    rows = records // window
    mask = valid.reshape(rows, window)
    if learning_only:
        mask = mask & learning.reshape(rows, window)
    values = priority.reshape(rows, window).to(torch.float64)
    per_window = _reduce_rows(values, mask, reduction, eta)
    anchor = anchor.reshape(rows, window, -1)[:, 0]
    return _dedupe(
        anchor, per_window.to(priority.dtype if priority.is_floating_point() else torch.float)
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


def _get(sample: Any, key: str) -> torch.Tensor:
    value = sample.get(key, None) if is_tensor_collection(sample) else sample.get(key)
    if value is None:
        raise ValueError(
            f"the sample has no {key!r} entry; pass a sample (or its info) produced by a "
            "Sequence sample unit."
        )
    return torch.as_tensor(value)


class _RecordPriorities:
    """Stand-in for a buffer's ``_get_priority_vector``: keeps window samples per record."""

    def __init__(self, buffer: Any) -> None:
        self.buffer = buffer

    def __call__(self, data: Any) -> torch.Tensor:
        buffer = self.buffer
        if not (is_tensor_collection(data) and "anchor_index" in data.keys()):
            return type(buffer)._get_priority_vector(buffer, data)
        priority = data.get(buffer.priority_key, None)
        if priority is None:
            default = buffer._sampler.default_priority
            return torch.full(data.shape, default, dtype=torch.float, device=data.device)
        return priority.reshape(data.shape)


class _AnchorPriorities:
    """Stand-in for a buffer's ``_anchor_reduced_priority``: the unit's reduction."""

    def __init__(self, unit: Any) -> None:
        self.unit = unit

    def __call__(self, data: Any, priority: torch.Tensor):
        if not (is_tensor_collection(data) and "anchor_index" in data.keys()):
            return None
        anchors, reduced = self.unit.reduce_priority(data, priority)
        if isinstance(anchors, tuple):
            anchors = torch.stack(anchors, -1)
        return anchors, reduced


def install_anchor_priorities(buffer: Any, unit: Any) -> None:
    """Routes ``buffer.update_tensordict_priority`` through ``unit``'s per-anchor reduction.

    Only prioritized TensorDict buffers have the two hooks; other buffers are left untouched.
    """
    if not (
        hasattr(type(buffer), "_anchor_reduced_priority")
        and hasattr(type(buffer), "_get_priority_vector")
    ):
        return
    buffer._get_priority_vector = _RecordPriorities(buffer)
    buffer._anchor_reduced_priority = _AnchorPriorities(unit)
