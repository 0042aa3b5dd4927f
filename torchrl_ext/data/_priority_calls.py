"""TorchRL's own priority calls on a buffer that samples through a :class:`Sequence` unit.

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

#: The buffer methods a unit replaces, in the order they are installed.
ROUTED = ("update_tensordict_priority", "update_priority")


class PriorityCalls:
    """The buffers whose priority calls one unit routes, and the routes' install and removal.

    Args:
        unit (Sequence): the unit whose ``update_priority`` window samples go through.
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
    """``buffer.update_tensordict_priority`` for a buffer sampling through a ``Sequence``.

    A sample carrying ``"anchor_index"`` (a window sample of the unit) is written with
    ``unit.update_priority(buffer, sample)``: the unit's reduction per anchor, NaN, infinite
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
    """Whether ``data`` is a batch of windows from a ``Sequence`` unit."""
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
