"""Priorities of window and tape samples, and TorchRL's priority calls on a unit's buffers.

A window's records share one priority, the one of the anchor the sampler drew:
:func:`reduce_window_priorities` reduces per-record priorities (TD errors) to one value per
anchor. A tape's episodes each get one priority, written to every record of the episode:
:func:`reduce_episode_priorities`. Both refuse values a sum tree must never hold.

TorchRL's ``rb.update_tensordict_priority(sample)`` reduces a window sample with its own rule
(a max over valid records, per anchor, for flat samples; for ``[B, window]`` samples a max
over every record, keyed by the window's first record) and writes whatever it gets, NaN
included, to the sampler's sum tree, after which every draw fails. TorchRL gives a sample unit
no hook into that call and no notice of the buffer it serves, so the unit replaces two methods
on the buffer object itself, once, the first time it samples for that buffer:

- ``update_tensordict_priority``: a sample carrying the unit's ``"anchor_index"`` goes through
  ``unit.update_priority(buffer, sample)`` (the unit's reduction, its checks); anything else
  (a record being added, data indexed by ``extend``) goes to TorchRL's method unchanged.
- ``update_priority``: refuses NaN, infinite or negative priorities, then calls TorchRL's
  method. This also guards callers that bound ``rb.update_tensordict_priority`` before the
  buffer's first sample (TorchRL's ``ReplayBufferTrainer`` does when it is built), which still
  reduce with TorchRL's rule.

Both are instance attributes holding the unit and the buffer (they pickle and copy with the
buffer); :meth:`PriorityCalls.restore` deletes them, leaving TorchRL's methods, and the unit
never installs them on that buffer again.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import torch
from tensordict import is_tensor_collection
from torchrl.data import PrioritizedSampler

from torchrl_ext._compat import buffer_sample_unit, storage_attached_entities

# -- one priority per anchor ----------------------------------------------------------------------


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
    _check_reduced_priorities(values, mask)
    per_window = _reduce_rows(values, mask, reduction, eta)
    anchor = anchor.reshape(rows, window, -1)[:, 0]
    return _dedupe(
        anchor, per_window.to(priority.dtype if priority.is_floating_point() else torch.float)
    )


def reduce_episode_priorities(
    sample: Any, priority: torch.Tensor, reduction: str, eta: float
) -> tuple[torch.Tensor | tuple[torch.Tensor, ...], torch.Tensor]:
    """Reduces per-record priorities of a tape sample to one value per episode and record.

    Each episode of the sample (its records share a ``"sequence_id"`` >= 0) is reduced over
    its valid records with ``reduction``; the result is written to every record of the
    episode. A record seen in several episodes of the sample (an episode drawn twice) keeps
    the largest result. Priorities of valid records must be finite and ``>= 0``; the masked
    tail (``"sequence_id"`` -1, invalid) is never read.

    Args:
        sample (TensorDict or dict): holds ``"index"`` (the records' storage coordinates, as
            TorchRL's buffers report them), ``"sequence_id"`` and optionally
            ``"validity_mask"``, one per record.
        priority (torch.Tensor): one priority per record.
        reduction (str): ``"max"``, ``"mean"`` or ``"mixture"``.
        eta (float): weight of the max in ``"mixture"``.

    Returns:
        ``(records, priorities)``: the distinct records as a ``[n]`` tensor (1-D storages) or a
        tuple of coordinate tensors, and their episodes' reduced priorities.
    """
    episode = _get(sample, "sequence_id").reshape(-1).long()
    records = episode.numel()
    priority = _as_priority(priority)
    if priority.numel() != records:
        raise ValueError(
            f"priority must hold one value per record ({records}), got a tensor of shape "
            f"{tuple(priority.shape)}."
        )
    index = _record_index(sample, records)
    valid = episode >= 0
    mask = _find(sample, "validity_mask")
    if mask is not None:
        valid &= mask.reshape(-1).to(valid.device)
    values = priority.reshape(-1).to(torch.float64)
    _check_episode_priorities(values, valid, episode)
    episode, values = episode[valid], values[valid]
    per_record = _reduce_groups(values, episode, reduction, eta)[episode]
    dtype = priority.dtype if priority.is_floating_point() else torch.float
    return _dedupe(index[valid.to(index.device)], per_record.to(dtype))


def _record_index(sample: Any, records: int) -> torch.Tensor:
    """The records' storage coordinates as ``[records, ndim]`` (``"index"``, tuple or stacked)."""
    index = sample.get("index", None)
    if index is None:
        raise ValueError(
            "the sample has no 'index' entry (the records' storage indices, which TorchRL's "
            "buffers add to every sample and info); pass the sample or info the buffer "
            "returned, or add the index that unit.expand returned under 'index'."
        )
    if isinstance(index, tuple):
        index = torch.stack([torch.as_tensor(c).reshape(-1) for c in index], -1)
    index = torch.as_tensor(index)
    if index.numel() == records:
        return index.reshape(records, 1)
    if index.numel() % records or index.shape[-1] * records != index.numel():
        raise ValueError(
            f"the sample's 'index' must hold the coordinates of each of its {records} "
            f"records, got a tensor of shape {tuple(index.shape)}."
        )
    return index.reshape(records, -1)


def _check_episode_priorities(
    values: torch.Tensor, valid: torch.Tensor, episode: torch.Tensor
) -> None:
    """Refuses NaN, infinite or negative priorities among the valid records of a tape."""
    bad = valid & ~(torch.isfinite(values) & (values >= 0))
    if bool(bad.any()):
        record = int(bad.nonzero()[0])
        raise ValueError(
            f"priorities must be finite and >= 0, got {values[record].item()!r} for record "
            f"{record} of the sample (flat), in episode {int(episode[record])} (its "
            "'sequence_id'). Check the TD errors for NaN or inf before updating priorities."
        )


def _reduce_groups(
    values: torch.Tensor, group: torch.Tensor, reduction: str, eta: float
) -> torch.Tensor:
    """``reduction`` of ``values`` per ``group`` id (``0 .. max``), one value per id."""
    size = int(group.max()) + 1 if group.numel() else 0
    group = group.to(values.device)
    count = torch.zeros(size, dtype=values.dtype, device=values.device)
    count.index_add_(0, group, torch.ones_like(values))
    mean = torch.zeros_like(count).index_add_(0, group, values) / count.clamp(min=1)
    if reduction == "mean":
        return mean
    peak = torch.full_like(count, -torch.inf).scatter_reduce_(0, group, values, reduce="amax")
    if reduction == "max":
        return peak
    return eta * peak + (1.0 - eta) * mean


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


def _check_reduced_priorities(values: torch.Tensor, mask: torch.Tensor) -> None:
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
    """Keeps the largest priority of an anchor (or record) met several times."""
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
            "Sequence or Tape sample unit."
        )
    return value


# -- TorchRL's priority calls on the unit's buffers -----------------------------------------------

#: The buffer methods a unit replaces, in the order they are installed.
ROUTED = ("update_tensordict_priority", "update_priority")


class PriorityCalls:
    """The buffers whose priority calls one unit routes, and the routes' install and removal.

    Args:
        unit (Sequence or Tape): the unit whose ``update_priority`` its samples go through.
    """

    def __init__(self, unit: Any) -> None:
        self._unit = unit
        self._lock = threading.Lock()
        #: buffers met once (routed, or restored by the user): never routed automatically again
        self._met: weakref.WeakSet = weakref.WeakSet()
        #: ``(storage, number of entities attached to it)`` when the storage was last looked at
        self._looked_at: tuple[weakref.ref, int] | None = None

    def install_on_buffers_of(self, storage: Any) -> None:
        """Routes the calls of every buffer reading ``storage`` through the unit, once each.

        Cheap when nothing changed: the storage and the count of its attached buffers are
        compared with the last look.
        """
        entities = storage_attached_entities(storage)
        looked = self._looked_at
        if looked is not None and looked[0]() is storage and looked[1] == len(entities):
            return
        with self._lock:
            for entity in list(entities):
                if buffer_sample_unit(entity) is self._unit and entity not in self._met:
                    self._met.add(entity)
                    _install(self._unit, entity)
            self._looked_at = (weakref.ref(storage), len(entities))

    def install(self, buffer: Any) -> None:
        """Routes ``buffer``'s priority calls through the unit (again, after :meth:`restore`)."""
        if buffer_sample_unit(buffer) is not self._unit:
            raise ValueError(
                f"buffer must sample through this unit (sample_unit=unit), got a "
                f"{type(buffer).__name__} whose sample unit is {buffer_sample_unit(buffer)!r}."
            )
        with self._lock:
            self._met.add(buffer)
            _install(self._unit, buffer)

    def restore(self, buffer: Any) -> None:
        """Gives ``buffer`` back TorchRL's methods; it is not routed automatically again."""
        with self._lock:
            self._met.add(buffer)
            attributes = vars(buffer)
            for name in ROUTED:
                route = attributes.get(name)
                if isinstance(route, _Route) and route.unit is self._unit:
                    del attributes[name]


def _install(unit: Any, buffer: Any) -> None:
    """Sets the routes on ``buffer``, leaving alone any method already set on the object."""
    attributes = vars(buffer)
    for name, route in (
        ("update_tensordict_priority", RoutedTensorDictPriority),
        ("update_priority", CheckedPriority),
    ):
        if callable(getattr(type(buffer), name, None)) and name not in attributes:
            setattr(buffer, name, route(unit, buffer))


class _Route:
    """One replaced buffer method: the unit and the buffer it was installed for."""

    #: the TorchRL method this route stands in front of
    name = ""

    def __init__(self, unit: Any, buffer: Any) -> None:
        self.unit = unit
        self.buffer = buffer

    def stock(self, *args: Any) -> Any:
        """TorchRL's own method of the buffer's class, called with ``args``."""
        return getattr(type(self.buffer), self.name)(self.buffer, *args)

    def __repr__(self) -> str:
        return f"<{self.name} of {type(self.buffer).__name__}, routed through {self.unit!r}>"


class RoutedTensorDictPriority(_Route):
    """``buffer.update_tensordict_priority`` for a buffer sampling through one of our units.

    A sample carrying ``"anchor_index"`` (a window or tape sample of the unit) is written with
    ``unit.update_priority(buffer, sample)``: the unit's reduction, NaN, infinite
    or negative priorities refused before the sum tree is touched. Other data, and buffers
    whose sampler is not prioritized, take TorchRL's method unchanged.
    """

    name = "update_tensordict_priority"

    def __call__(self, data: Any) -> None:
        """Writes the priorities of ``data`` (see the class docstring)."""
        if _is_window_sample(data) and _is_prioritized(self.buffer):
            self.unit.update_priority(self.buffer, data)
            return None
        return self.stock(data)


class CheckedPriority(_Route):
    """``buffer.update_priority`` that refuses priorities a sum tree must never hold."""

    name = "update_priority"

    def __call__(self, index: Any, priority: Any) -> None:
        """Refuses NaN, infinite or negative priorities, then calls TorchRL's method."""
        check_finite_priority(priority)
        return self.stock(index, priority)


def check_finite_priority(priority: Any) -> None:
    """Raises ``ValueError`` naming the first NaN, infinite or negative value of ``priority``.

    Values that are not real numbers are left to TorchRL's own checks.
    """
    try:
        values = torch.as_tensor(priority).detach()
    except (TypeError, ValueError, RuntimeError):
        return
    if values.dtype is torch.bool or values.is_complex():
        return
    bad = ~(torch.isfinite(values) & (values >= 0))
    if bool(bad.any()):
        position = int(bad.reshape(-1).nonzero()[0])
        raise ValueError(
            f"priorities must be finite and >= 0, got {values.reshape(-1)[position].item()!r} "
            f"at priority[{position}] (flat). Check the TD errors for NaN or inf before "
            "updating priorities; nothing was written."
        )


def _is_window_sample(data: Any) -> bool:
    """Whether ``data`` is a batch of windows (``Sequence``) or tapes (``Tape``)."""
    return is_tensor_collection(data) and data.batch_dims > 0 and "anchor_index" in data.keys()


def _is_prioritized(buffer: Any) -> bool:
    """Whether TorchRL's ``update_tensordict_priority`` of ``buffer`` writes priorities.

    A ``TensorDictReplayBuffer`` writes only with a prioritized sampler; a
    ``TensorDictPrioritizedReplayBuffer`` always does (with ``sync=False`` its tree belongs to
    ``prioritized_sampler``, not to ``sampler``).
    """
    if isinstance(getattr(type(buffer), "prioritized_sampler", None), property):
        return True
    return isinstance(getattr(buffer, "sampler", None), PrioritizedSampler)
