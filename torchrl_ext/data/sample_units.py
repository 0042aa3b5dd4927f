"""Sample units: what each anchor drawn by a replay-buffer sampler expands into.

A TorchRL replay buffer samples in two steps: its sampler picks *anchors* (where in the storage,
with what probability), then its ``sample_unit`` decides what each anchor *expands into*, before
the storage is read. :class:`Transition` keeps one record per anchor; :class:`Sequence` expands
each anchor into a window of records for recurrent learners (burn-in, learning region,
bootstrap), respecting episode boundaries; its settings live in ``_sequence_settings``, what it
reads and checks in ``_sequence_checks``, and how windows are built in ``_sequence_windows``.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Literal

import torch
from tensordict.utils import NestedKey
from torchrl.data.replay_buffers.sample_units import SampleUnit as _TorchRLSampleUnit
from torchrl.data.replay_buffers.sample_units import Sequence as _TorchRLSequence
from torchrl.data.replay_buffers.storages import Storage

from torchrl_ext.data import _episodes
from torchrl_ext.data._priorities import priority_to_write, reduce_window_priorities
from torchrl_ext.data._priority_calls import PriorityCalls
from torchrl_ext.data._sequence_checks import check_anchors, read_storage, split_anchors
from torchrl_ext.data._sequence_settings import Setting, check_settings
from torchrl_ext.data._sequence_windows import (
    WindowSpec,
    compiled_applies,
    expand_info,
    records_compiled,
    records_vectorized,
    window_table,
)

__all__ = ["SampleUnit", "Sequence", "Transition"]


class SampleUnit(_TorchRLSampleUnit):
    """Base class of torchrl_ext sample units; a drop-in torchrl ``SampleUnit``.

    A sample unit is called by the replay buffer after its sampler chose anchors and before the
    storage is read: ``expand(index, info, storage) -> (index, info)``. It returns the storage
    indices the batch is made of and the sampler's info, with every per-anchor entry (e.g.
    importance weights) aligned to the returned records. It never writes to the storage.

    Subclasses implement :meth:`expand`. Instances are accepted by every stock torchrl buffer
    through its ``sample_unit=`` argument.

    Examples:
        >>> import torch
        >>> from torchrl.data import LazyTensorStorage, ReplayBuffer
        >>> from torchrl_ext import SampleUnit
        >>> class EveryOther(SampleUnit):
        ...     def expand(self, index, info, storage):
        ...         return index - index % 2, info
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(8), batch_size=4, sample_unit=EveryOther())
        >>> _ = rb.extend(torch.arange(8))
        >>> bool((rb.sample() % 2 == 0).all())
        True
    """


class Transition(SampleUnit):
    """The identity unit: every anchor is one record, and the info is left as it is.

    ``sample_unit=None`` and ``sample_unit=Transition()`` draw identical batches from the same
    generator state.

    Examples:
        >>> import torch
        >>> from torchrl.data import LazyTensorStorage, ReplayBuffer
        >>> from torchrl_ext import Transition
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=4, sample_unit=Transition())
        >>> _ = rb.extend(torch.arange(10))
        >>> rb.sample().shape
        torch.Size([4])
    """

    def expand(
        self, index: torch.Tensor | tuple, info: dict[str, Any], storage: Storage
    ) -> tuple[torch.Tensor | tuple, dict[str, Any]]:
        """Returns ``index`` and ``info`` unchanged."""
        return index, info

    def __repr__(self) -> str:
        return "Transition()"


class Sequence(SampleUnit, _TorchRLSequence):
    """Expands each anchor into a window: burn-in, learning region, bootstrap.

    Record ``k`` of an anchor's window (``k = 0 .. burn_in + length + bootstrap - 1``) sits
    ``(k - burn_in) * stride`` records after the anchor in its trajectory. The first ``burn_in``
    records rebuild a recurrent state, the next ``length`` carry the loss (``learning_mask``),
    the last ``bootstrap`` feed multi-step targets. A batch of ``B`` anchors returns
    ``B * window`` records, flat (``layout="flat"``) or shaped ``[B, window]``
    (``layout="batch_time"``).

    Episode boundaries (``episode_boundary``):

    - ``"pad"``: the window keeps its anchor; records past the episode's last record repeat that
      record and are marked invalid.
    - ``"stop"``: the window shifts back so that its last record is the episode's last record;
      when the episode is too short for that, it falls back to ``"pad"``.
    - ``"include_reset"``: windows run across episode ends with every record valid, but never
      across the ring buffer's write seam or into unwritten slots (those records repeat the last
      reachable one and are invalid).

    Burn-in never shifts the anchor: burn-in records before the episode's first record (or
    before the oldest stored record) repeat that record and are invalid. Bootstrap records obey
    the boundary policy.

    Boundaries come from the stored ``done_key`` flags in storage order, or from a trajectory id
    (``traj_key``), which also handles trajectories interleaved in storage. With done flags no
    index is kept at all: the flags are read only inside each anchor's reach, so a sample costs
    O(B * window) right after a write, whatever the capacity. With ``traj_key`` a per-slot link
    index is updated incrementally on every write.

    Per-record info entries (also keys of TensorDict samples): ``"sequence_id"`` (window number
    in the batch), ``"step_in_sequence"``, ``"validity_mask"``, ``"learning_mask"`` (True exactly
    on the learning region), ``"anchor_index"`` (the anchor the sampler drew, before any
    ``"stop"`` shift; full coordinates on multi-dimensional storages) and, with
    ``layout="batch_time"``, ``is_init_key`` (True at each window's first record, where its valid
    part begins, and wherever a new episode starts inside it), which a torchrl ``LSTMModule``
    reads to reset its state. Per-anchor info entries (importance weights) are repeated over
    their window.

    Settings are fixed at construction: assigning one raises :class:`AttributeError` (build a
    new unit instead). Stored entries must not use the names of the per-record info entries; a
    stored bool reset flag under ``is_init_key`` is the one exception, superseded by the
    window's flags in ``"batch_time"`` samples.

    Priorities stay per anchor: ``unit.update_priority(rb, sample)`` reduces each window's
    per-record priorities (the sample's ``rb.priority_key`` entry) over its valid records
    (``priority_learning_only=True``: learning records only; a sample without
    ``"learning_mask"`` or ``"validity_mask"``, as torchrl's own unit accepts, reduces over
    the masks it has) with ``priority_reduction`` (``"max"``; ``"mean"``; ``"mixture"``,
    R2D2's ``eta * max + (1 - eta) * mean``) and writes them to the anchors with the buffer's
    public ``update_priority``. TorchRL's own ``rb.update_tensordict_priority(sample)`` does
    the same: TorchRL gives a unit no hook into that call, so the first time the unit samples
    for a buffer it sets two methods on that buffer object (see
    :meth:`route_priority_calls`, undone by :meth:`restore_priority_calls`). Either call
    refuses NaN, infinite or negative priorities before the sum tree is touched.

    Args:
        length (int): records in the learning region, ``>= 1``.
        episode_boundary (str, optional): ``"pad"``, ``"stop"`` or ``"include_reset"``.
            Defaults to ``"pad"``.
        done_key (NestedKey or None, optional): stored flag that ends an episode. ``None``
            treats the written span as one trajectory. Defaults to ``("next", "done")``.
        burn_in (int, optional): records before the anchor, ``>= 0``. Defaults to 0.
        bootstrap (int, optional): records after the learning region, ``>= 0``. They hold the
            observations an n-step target reads; a window never reaches past its episode's
            last record, so a target that bootstraps a *truncated* episode end must read that
            record's ``("next", ...)`` observation (store it, as TorchRL collectors do).
            Defaults to 0.
        stride (int, optional): storage records between consecutive window records, ``>= 1``.
            Defaults to 1.
        dilation (int, optional): torchrl's name for ``stride``; give one or the other.
        traj_key (NestedKey, optional): stored trajectory id. When given, episodes are the runs
            of records sharing an id, in write order (``done_key`` is not read). 1-D storages
            only; not with ``"include_reset"``. Defaults to ``None``.
        layout (str, optional): ``"flat"`` (``[B * window]`` samples, torchrl's) or
            ``"batch_time"`` (``[B, window]``). Defaults to ``"flat"``.
        priority_reduction (str, optional): ``"max"``, ``"mean"`` or ``"mixture"``.
            Defaults to ``"max"``.
        priority_eta (float, optional): weight of the max in ``"mixture"``, in ``[0, 1]``.
            Defaults to 0.9 (R2D2).
        priority_learning_only (bool, optional): reduce over learning records only.
            Defaults to ``False``.
        is_init_key (NestedKey, optional): where ``layout="batch_time"`` writes its reset
            flags. Defaults to ``"is_init"``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
        >>> from torchrl_ext import Sequence
        >>> done = torch.zeros(20, 1, dtype=torch.bool)
        >>> done[[9, 19]] = True
        >>> data = TensorDict({"obs": torch.arange(20.0), ("next", "done"): done}, [20])
        >>> unit = Sequence(length=3, burn_in=2, bootstrap=1)
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20), sample_unit=unit)
        >>> _ = rb.extend(data)
        >>> index, info = unit.expand(torch.tensor([11, 8]), {}, rb.storage)
        >>> index.view(2, -1).tolist()  # burn-in clamps at 10; the window pads at 9
        [[10, 10, 11, 12, 13, 14], [6, 7, 8, 9, 9, 9]]
        >>> info["validity_mask"].view(2, -1).tolist()
        [[False, True, True, True, True, True], [True, True, True, True, False, False]]
        >>> info["learning_mask"].view(2, -1)[0].tolist()
        [False, False, True, True, True, False]
        >>> unit = Sequence(length=3, burn_in=2, bootstrap=1, layout="batch_time")
        >>> rb = TensorDictReplayBuffer(
        ...     storage=LazyTensorStorage(20), sample_unit=unit, batch_size=4,
        ...     generator=torch.Generator().manual_seed(0),
        ... )
        >>> _ = rb.extend(data)
        >>> batch = rb.sample()
        >>> batch.shape, batch["is_init"][:, 0].all().item()
        (torch.Size([4, 6]), True)
    """

    #: Use the compiled loop for done-flag boundaries on CPU (``False``: batched tensor ops).
    use_compiled: bool = True

    def __init__(
        self,
        length: int,
        episode_boundary: Literal["pad", "stop", "include_reset"] = "pad",
        done_key: NestedKey | None = ("next", "done"),
        burn_in: int = 0,
        bootstrap: int = 0,
        stride: int | None = None,
        *,
        dilation: int | None = None,
        traj_key: NestedKey | None = None,
        layout: Literal["flat", "batch_time"] = "flat",
        priority_reduction: Literal["max", "mean", "mixture"] = "max",
        priority_eta: float = 0.9,
        priority_learning_only: bool = False,
        is_init_key: NestedKey = "is_init",
    ) -> None:
        self._config = check_settings(
            length, episode_boundary, done_key, burn_in, bootstrap, stride, dilation, traj_key,
            layout, priority_reduction, priority_eta, priority_learning_only, is_init_key,
        )  # fmt: skip
        self._traj_index: _episodes.TrajectoryIndex | None = None
        self._lock = threading.Lock()
        self._tables: dict[torch.device, tuple[torch.Tensor, ...]] = {}
        # (contents, done flags) of the last storage read, checked for colliding keys
        self._known: tuple[Any, torch.Tensor | None] | None = None
        self._priority_calls = PriorityCalls(self)

    # -- window geometry ---------------------------------------------------------------------

    @property
    def dilation(self) -> int:
        """Torchrl's name for :attr:`stride`."""
        return self.stride

    @dilation.setter
    def dilation(self, value: int) -> None:
        Setting.refuse(self, "dilation", value)

    @property
    def window(self) -> int:
        """Records per anchor: ``burn_in + length + bootstrap``."""
        return self._spec.window

    @functools.cached_property
    def _spec(self) -> WindowSpec:
        """The settings that say what a window is (fixed, so computed once; not pickled)."""
        return WindowSpec.of(self._config)

    # -- expansion ---------------------------------------------------------------------------

    def expand(
        self, index: torch.Tensor | tuple, info: dict[str, Any], storage: Storage
    ) -> tuple[torch.Tensor | tuple, dict[str, Any]]:
        """Expands anchors into windows of records.

        Args:
            index (torch.Tensor or tuple of torch.Tensor): anchors, ``[B]`` on a 1-D storage or
                a tuple of ``ndim`` coordinate tensors ``[B]``.
            info (dict): the sampler's info; per-anchor entries must have ``B`` rows.
            storage (Storage): a TensorDict-backed ``TensorStorage``.

        Returns:
            ``(index, info)``: record coordinates (``[B * window]`` or ``[B, window]``, a tuple
            on multi-dimensional storages) and the info with per-record entries added.

        Raises:
            TypeError: if the storage is not TensorDict-backed or the anchors are not integers.
            IndexError: if an anchor addresses a record that was never written (or a lane the
                storage does not have). Nothing is read before this check.
            ValueError: on a missing done/traj key, an info entry not aligned with anchors,
                trajectory ids that are not whole numbers, non-finite done flags, or a stored
                entry that a per-record info entry would overwrite.
        """
        done_key = self.done_key if self.traj_key is None else None
        view, self._known = read_storage(
            storage, done_key, type(self).__name__, self._known, self.layout, self.is_init_key
        )
        time, lanes, anchors = split_anchors(index, storage.ndim)
        check_anchors(time, lanes, view)
        expanded = expand_info(info, time.shape[0], self._spec)
        if compiled_applies(self.use_compiled, self.traj_key, view, time, lanes):
            index, per_record = records_compiled(view, time, lanes, self._spec)
        else:
            reach = self._reach(view, storage, time, lanes)
            table = window_table(self._spec, self._tables, time.device)
            index, per_record = records_vectorized(reach, table, time, lanes, anchors, self._spec)
        self._priority_calls.install_on_buffers_of(storage)
        return index, {**expanded, **per_record}

    def _reach(self, view, storage, time, lanes) -> _episodes.Reach:
        if self.traj_key is not None:
            return self._trajectory_index(storage).reach(time, self._spec.back, self._spec.forward)
        crosses = self.episode_boundary == "include_reset"
        flags = view.flags if not crosses or self.layout == "batch_time" else None
        return _episodes.reach_in_storage_order(
            view, flags, time, lanes, self._spec.back, self._spec.forward, crosses
        )

    # -- trajectory ids ----------------------------------------------------------------------

    def _trajectory_index(self, storage: Storage) -> _episodes.TrajectoryIndex:
        with self._lock:
            index = self._traj_index
            if index is None or index.storage is not storage:
                index = _episodes.TrajectoryIndex(storage, self.traj_key, type(self).__name__)
                self._traj_index = index
                storage.attach(self)
            if index.is_stale():
                index.rebuild()
            return index

    def mark_update(self, index: torch.Tensor | int, *, storage: Storage | None = None) -> None:
        """Called by the buffer's writer after each write; keeps the trajectory index current."""
        traj_index = self._traj_index
        if traj_index is not None:
            traj_index.mark_update(index)

    # -- priorities --------------------------------------------------------------------------

    def reduce_priority(
        self, sample: Any, priority: torch.Tensor
    ) -> tuple[torch.Tensor | tuple[torch.Tensor, ...], torch.Tensor]:
        """Reduces per-record priorities of a sample to one priority per distinct anchor.

        Each window is reduced over its valid records (learning records only with
        ``priority_learning_only``) with :attr:`priority_reduction`; an anchor drawn in several
        windows keeps the largest result.

        Args:
            sample (TensorDict or dict): the sample (or its info) with ``"anchor_index"`` and,
                optionally, ``"validity_mask"`` and ``"learning_mask"``.
            priority (torch.Tensor): one priority per record, shaped like the sample.

        Returns:
            ``(anchors, priorities)`` for ``rb.update_priority``.

        Raises:
            ValueError: if a reduced record's priority is NaN, infinite or negative (the
                message names the record), or ``priority`` does not hold one value per record.
        """
        return reduce_window_priorities(
            sample,
            priority,
            self.window,
            self.priority_reduction,
            self.priority_eta,
            self.priority_learning_only,
        )

    def update_priority(
        self, buffer: Any, sample: Any, priority: torch.Tensor | None = None
    ) -> None:
        """Reduces a sample's per-record priorities with this unit and writes them to anchors.

        Reduces with :meth:`reduce_priority` (this unit's ``priority_reduction`` over valid
        records, or learning records only with ``priority_learning_only``), then calls the
        buffer's public ``update_priority(anchors, priorities)``. NaN, infinite or negative
        priorities of reduced records are refused before the buffer is touched.

        Args:
            buffer (ReplayBuffer): a prioritized buffer sampling through this unit.
            sample (TensorDict or dict): the sample (or its info) the priorities belong to.
            priority (torch.Tensor, optional): one priority per record. Defaults to the
                sample's ``buffer.priority_key`` entry (``"td_error"`` by default).

        Raises:
            TypeError: if ``buffer`` has no ``update_priority`` method.
            ValueError: if ``priority`` is not given and the sample has no entry under the
                buffer's priority key, or as :meth:`reduce_priority`.

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> from torchrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer
            >>> from torchrl_ext import Sequence
            >>> unit = Sequence(length=2, done_key=None, priority_reduction="mean")
            >>> rb = TensorDictPrioritizedReplayBuffer(
            ...     alpha=1.0, beta=1.0, storage=LazyTensorStorage(10), sample_unit=unit,
            ...     batch_size=3, generator=torch.Generator().manual_seed(0),
            ... )
            >>> _ = rb.extend(TensorDict({"obs": torch.arange(10.0)}, [10]))
            >>> sample = rb.sample()
            >>> sample.shape
            torch.Size([6])
            >>> sample["td_error"] = torch.tensor([1.0, 3.0, 0.0, 2.0, 4.0, 4.0])
            >>> unit.reduce_priority(sample, sample["td_error"])[1].tolist()  # window means
            [4.0, 2.0, 1.0]
            >>> unit.update_priority(rb, sample)  # writes them to the three anchors
        """
        priority = priority_to_write(buffer, sample, priority)
        buffer.update_priority(*self.reduce_priority(sample, priority))

    def route_priority_calls(self, buffer: Any) -> None:
        """Routes TorchRL's priority calls of ``buffer`` through this unit.

        Done automatically the first time the unit samples for ``buffer``; call it yourself
        only to route a buffer before its first sample (a priority method bound earlier, as
        TorchRL's ``ReplayBufferTrainer`` binds ``rb.update_tensordict_priority`` when it is
        built, keeps TorchRL's reduction), or again after :meth:`restore_priority_calls`.

        Sets two attributes on the buffer object: ``update_tensordict_priority``, which writes
        window samples (those carrying ``"anchor_index"``) with :meth:`update_priority` and
        passes any other data to TorchRL's method, and ``update_priority``, which refuses NaN,
        infinite or negative priorities before calling TorchRL's method. A method already set
        on the object is left alone.

        Args:
            buffer (ReplayBuffer): a buffer built with ``sample_unit=`` this unit.

        Raises:
            ValueError: if ``buffer`` does not sample through this unit.

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> from torchrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer
            >>> from torchrl_ext import Sequence
            >>> unit = Sequence(length=2, done_key=None, priority_reduction="mean")
            >>> rb = TensorDictPrioritizedReplayBuffer(
            ...     alpha=1.0, beta=1.0, storage=LazyTensorStorage(10), sample_unit=unit,
            ...     batch_size=3, generator=torch.Generator().manual_seed(0),
            ... )
            >>> _ = rb.extend(TensorDict({"obs": torch.arange(10.0)}, [10]))
            >>> sample = rb.sample()  # the first sample routes the buffer's calls
            >>> sample["td_error"] = torch.tensor([1.0, 3.0, 0.0, 2.0, 4.0, float("nan")])
            >>> try:
            ...     rb.update_tensordict_priority(sample)  # TorchRL's call, this unit's rules
            ... except ValueError as err:
            ...     print("refused:", str(err).startswith("priorities must be finite"))
            refused: True
            >>> unit.restore_priority_calls(rb)  # TorchRL's own methods again
            >>> "update_tensordict_priority" in vars(rb)
            False
            >>> unit.route_priority_calls(rb)
            >>> "update_tensordict_priority" in vars(rb)
            True
        """
        self._priority_calls.install(buffer)

    def restore_priority_calls(self, buffer: Any) -> None:
        """Gives ``buffer`` back TorchRL's own priority methods, for good.

        Removes what :meth:`route_priority_calls` set on the buffer object; the unit does not
        route that buffer again unless :meth:`route_priority_calls` is called. Then
        ``rb.update_tensordict_priority`` reduces windows with TorchRL's rule and writes
        priorities unchecked, so call :meth:`update_priority` instead.

        Args:
            buffer (ReplayBuffer): a buffer that samples (or sampled) through this unit.
        """
        self._priority_calls.restore(buffer)

    # -- misc --------------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_spec", None)
        state["_traj_index"] = None
        state["_lock"] = None
        state["_tables"] = {}
        state["_known"] = None
        state["_priority_calls"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._priority_calls = PriorityCalls(self)

    def __repr__(self) -> str:
        return (
            f"Sequence(length={self.length}, episode_boundary={self.episode_boundary!r}, "
            f"burn_in={self.burn_in}, bootstrap={self.bootstrap}, stride={self.stride}, "
            f"layout={self.layout!r})"
        )


# every constructor argument reads back as a fixed setting: ``unit.length``, ``unit.layout``, ...
for _name in (
    "length", "episode_boundary", "done_key", "traj_key", "burn_in", "bootstrap", "stride",
    "layout", "priority_reduction", "priority_eta", "priority_learning_only", "is_init_key",
):  # fmt: skip
    setattr(Sequence, _name, Setting(_name))
del _name
