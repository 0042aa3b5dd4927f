"""Sample units: what each anchor drawn by a replay-buffer sampler expands into.

A TorchRL replay buffer samples in two steps: its sampler picks *anchors* (where in the storage,
with what probability), then its ``sample_unit`` decides what each anchor *expands into*, before
the storage is read. :class:`Transition` keeps one record per anchor; :class:`Sequence` expands
each anchor into a window of records for recurrent learners (burn-in, learning region,
bootstrap), respecting episode boundaries; :class:`Tape` lays the episodes the anchors select
whole, end to end, into tapes of a fixed length (no padding inside, no episode cut). Their
settings (validated together, fixed afterwards) and what they read and check before any
record is laid out are below them in this module; windows are built in ``_windows``, tapes in
``_tapes``, and priorities and TorchRL's priority calls live in ``_priorities``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

import torch
from tensordict.utils import NestedKey
from torchrl.data.replay_buffers.sample_units import SampleUnit as _TorchRLSampleUnit
from torchrl.data.replay_buffers.sample_units import Sequence as _TorchRLSequence
from torchrl.data.replay_buffers.storages import Storage

from torchrl_ext._checks import check_bool, check_choice, check_float, check_int, check_key
from torchrl_ext.data import _episodes
from torchrl_ext.data._priorities import (
    PriorityCalls,
    reduce_episode_priorities,
    reduce_window_priorities,
)
from torchrl_ext.data._tapes import TapeBuilder, TapeSpec
from torchrl_ext.data._windows import WindowBuilder, WindowSpec

__all__ = ["SampleUnit", "Sequence", "Tape", "Transition"]


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
        self._config = _check_settings(
            length, episode_boundary, done_key, burn_in, bootstrap, stride, dilation, traj_key,
            layout, priority_reduction, priority_eta, priority_learning_only, is_init_key,
        )  # fmt: skip
        self._trajectories = _episodes.TrajectoryIds(self.traj_key, type(self).__name__)
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
        _Setting.refuse(self, "dilation", value)

    @property
    def window(self) -> int:
        """Records per anchor: ``burn_in + length + bootstrap``."""
        return self._window_builder.spec.window

    @functools.cached_property
    def _window_builder(self) -> WindowBuilder:
        """Builds this unit's windows (its settings are fixed, so made once; not pickled)."""
        return WindowBuilder(_spec_of(WindowSpec, self._config))

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
        view, self._known = _read_storage(
            storage, done_key, type(self).__name__, self._known, self.layout, self.is_init_key
        )
        time, lanes, anchors = _split_anchors(index, storage.ndim)
        _check_anchors(time, lanes, view)
        trajectories = self._trajectories.lookup(storage, self)
        index, info = self._window_builder.build(
            view, time, lanes, anchors, info, self.use_compiled, trajectories
        )
        self._priority_calls.install_on_buffers_of(storage)
        return index, info

    # -- trajectory ids ----------------------------------------------------------------------

    def mark_update(self, index: torch.Tensor | int, *, storage: Storage | None = None) -> None:
        """Called by the buffer's writer after each write; keeps the trajectory index current."""
        self._trajectories.mark_update(index)

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
        priority = _priority_to_write(buffer, sample, priority)
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
        return _state_to_pickle(self.__dict__, "_window_builder")

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._priority_calls = PriorityCalls(self)

    def __repr__(self) -> str:
        return (
            f"Sequence(length={self.length}, episode_boundary={self.episode_boundary!r}, "
            f"burn_in={self.burn_in}, bootstrap={self.bootstrap}, stride={self.stride}, "
            f"layout={self.layout!r})"
        )


class Tape(SampleUnit):
    """Lays the episodes of the drawn anchors whole, end to end, into tapes of ``length`` records.

    The anchors the buffer's sampler draws (``batch_size`` of them: the sample's *draws*) each
    select the episode holding them. Episodes are placed in draw order, each whole in the first
    tape with room left for it; a draw whose episode fits in no tape is skipped and the next
    draw is tried. When every tape is full, or the draws run out, each tape that is not full
    ends with a *masked tail*: records repeating the tape's last record, with
    ``validity_mask`` False and ``is_init`` True at the tail's first record. No episode is
    ever cut, and a tape holds no padding before its tail. A sample holds ``length`` records
    (``rows=None``: one tape, shaped ``[length]``) or ``rows * length`` (``[rows, length]``),
    whatever the episodes: a memory runs over whole tapes and resets at every ``is_init``.

    How many draws: a tape of ``length`` records takes about ``length / L`` episodes of mean
    length ``L``, so ``batch_size = 2 * rows * length // L`` leaves draws to spare for the
    skips; the mean of ``validity_mask`` says how full the tapes are. Draws left over when the
    tapes are full cost only the read of their episode's bounds (every draw is checked against
    ``length``).

    Which episodes: each draw selects an episode with the probability the sampler gives its
    records together: its length over the stored records under a uniform sampler; the sum of
    its records' priorities (to the power ``alpha``) under a ``PrioritizedSampler``. The first
    draw always starts the first tape, so the episode there follows that distribution exactly;
    later draws are skipped when they do not fit, which favours short episodes at the end of a
    tape. Draws are independent: an episode drawn twice is laid out twice.

    Episodes longer than ``length`` are refused, never cut: a sample in which an anchor lies
    in one raises :class:`ValueError` naming the anchor and the episode's length. Pass a
    ``length`` of at least the longest episode (or end episodes sooner).

    Episode boundaries follow :class:`Sequence`: done flags (``done_key``) in storage order,
    where the ring buffer's write seam also ends every trajectory, or trajectory ids
    (``traj_key``). So the newest episode, still being written, is laid out as far as it is
    stored, and the oldest one, partly overwritten, starts at the oldest stored record (with
    ``is_init`` there, as at any episode start).

    Per-record info entries (also keys of TensorDict samples): ``"sequence_id"`` (the episode's
    number in the sample, in tape order; -1 on tails), ``"step_in_sequence"`` (the record's
    step in its episode, from 0; -1 on tails), ``"validity_mask"``, ``"anchor_index"`` (the
    draw that selected the record's episode; on a tail, that of the record it repeats; full
    coordinates on multi-dimensional storages) and ``is_init_key`` (True at the first record
    of every episode and of every tail, nowhere else), which a torchrl ``LSTMModule`` reads to
    reset its state. There is no burn-in, so every valid record is a learning record and
    samples carry no ``"learning_mask"``. Per-anchor info entries (importance weights) are
    carried to every record of the episode the anchor selected.

    Settings are fixed at construction, as :class:`Sequence`'s. Stored entries must not use
    the names of the per-record info entries, except a stored bool reset flag under
    ``is_init_key``, which the tape's flags supersede.

    Priorities are per episode: ``unit.update_priority(rb, sample)`` reduces each episode's
    per-record priorities (the sample's ``rb.priority_key`` entry) over its records with
    ``priority_reduction`` (``"max"``; ``"mean"``; ``"mixture"``, R2D2's
    ``eta * max + (1 - eta) * mean``) and writes the result to *every* record of the episode
    (the sample's ``"index"``), so a ``PrioritizedSampler`` then draws the episode with
    probability proportional to ``length * priority ** alpha``. An episode laid out twice keeps
    the larger result. TorchRL's ``rb.update_tensordict_priority(sample)`` is routed to the
    same method as for :class:`Sequence` (see :meth:`route_priority_calls`); NaN, infinite or
    negative priorities are refused before the sum tree is touched.

    Args:
        length (int): records per tape, ``>= 1``; at least the longest episode sampled.
        rows (int or None, optional): tapes per sample, ``>= 1``, shaped ``[rows, length]``
            (``rows=1`` keeps the row dim); ``None`` gives one tape shaped ``[length]``.
            Defaults to ``None``.
        done_key (NestedKey or None, optional): stored flag that ends an episode. ``None``
            treats the written span as one trajectory. Defaults to ``("next", "done")``.
        traj_key (NestedKey, optional): stored trajectory id. When given, episodes are the runs
            of records sharing an id, in write order (``done_key`` is not read). 1-D storages
            only. Defaults to ``None``.
        priority_reduction (str, optional): ``"max"``, ``"mean"`` or ``"mixture"``.
            Defaults to ``"max"``.
        priority_eta (float, optional): weight of the max in ``"mixture"``, in ``[0, 1]``.
            Defaults to 0.9 (R2D2).
        is_init_key (NestedKey, optional): where the reset flags are written.
            Defaults to ``"is_init"``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
        >>> from torchrl_ext import Tape
        >>> done = torch.zeros(10, 1, dtype=torch.bool)
        >>> done[[2, 7, 9]] = True  # episodes 0-2, 3-7 and 8-9
        >>> data = TensorDict({"obs": torch.arange(10.0), ("next", "done"): done}, [10])
        >>> unit = Tape(length=6, rows=2)
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), sample_unit=unit)
        >>> _ = rb.extend(data)
        >>> # 4 draws: 3-7 starts tape 0; 0-2 does not fit there, starts tape 1; 8-9 follows
        >>> # it; 3-7 again fits nowhere and is skipped
        >>> index, info = unit.expand(torch.tensor([4, 0, 9, 6]), {}, rb.storage)
        >>> index.tolist()
        [[3, 4, 5, 6, 7, 7], [0, 1, 2, 8, 9, 9]]
        >>> info["is_init"].tolist()
        [[True, False, False, False, False, True], [True, False, False, True, False, True]]
        >>> info["validity_mask"].tolist()
        [[True, True, True, True, True, False], [True, True, True, True, True, False]]
        >>> info["sequence_id"].tolist()
        [[0, 0, 0, 0, 0, -1], [1, 1, 1, 2, 2, -1]]
        >>> rb = TensorDictReplayBuffer(
        ...     storage=LazyTensorStorage(10), sample_unit=Tape(8), batch_size=6,
        ...     generator=torch.Generator().manual_seed(0),
        ... )
        >>> _ = rb.extend(data)
        >>> tape = rb.sample()
        >>> tape.shape, tape["is_init"][0].item()
        (torch.Size([8]), True)
    """

    def __init__(
        self,
        length: int,
        *,
        rows: int | None = None,
        done_key: NestedKey | None = ("next", "done"),
        traj_key: NestedKey | None = None,
        priority_reduction: Literal["max", "mean", "mixture"] = "max",
        priority_eta: float = 0.9,
        is_init_key: NestedKey = "is_init",
    ) -> None:
        self._config = _check_tape_settings(
            length, rows, done_key, traj_key, priority_reduction, priority_eta, is_init_key
        )
        self._trajectories = _episodes.TrajectoryIds(self.traj_key, type(self).__name__)
        # (contents, done flags) of the last storage read, checked for colliding keys
        self._known: tuple[Any, torch.Tensor | None] | None = None
        self._priority_calls = PriorityCalls(self)

    @property
    def shape(self) -> torch.Size:
        """The shape of every sample: ``[length]``, or ``[rows, length]``."""
        return self._tape_builder.spec.shape

    @functools.cached_property
    def _tape_builder(self) -> TapeBuilder:
        """Builds this unit's tapes (its settings are fixed, so made once; not pickled)."""
        return TapeBuilder(_spec_of(TapeSpec, self._config))

    # -- expansion ---------------------------------------------------------------------------

    def expand(
        self, index: torch.Tensor | tuple, info: dict[str, Any], storage: Storage
    ) -> tuple[torch.Tensor | tuple, dict[str, Any]]:
        """Lays the episodes of the anchors (the draws) into tapes.

        Args:
            index (torch.Tensor or tuple of torch.Tensor): anchors, ``[B]`` on a 1-D storage or
                a tuple of ``ndim`` coordinate tensors ``[B]``; ``B >= 1``.
            info (dict): the sampler's info; per-anchor entries must have ``B`` rows.
            storage (Storage): a TensorDict-backed ``TensorStorage``.

        Returns:
            ``(index, info)``: record coordinates (shaped :attr:`shape`, a tuple on
            multi-dimensional storages) and the info with per-record entries added.

        Raises:
            TypeError: if the storage is not TensorDict-backed or the anchors are not integers.
            IndexError: if an anchor addresses a record that was never written (or a lane the
                storage does not have). Nothing is read before this check.
            ValueError: if there are no anchors, an anchor lies in an episode longer than
                ``length``, on a missing done/traj key, an info entry not aligned with
                anchors, trajectory ids that are not whole numbers, non-finite done flags, or
                a stored entry that a per-record info entry would overwrite.
        """
        owner = type(self).__name__
        done_key = self.done_key if self.traj_key is None else None
        view, self._known = _read_storage(
            storage, done_key, owner, self._known, "batch_time", self.is_init_key, _TAPE_KEYS
        )
        time, lanes, anchors = _split_anchors(index, storage.ndim)
        if not time.numel():
            raise ValueError(
                f"{owner} lays out the episodes of the sampler's anchors and got none; give "
                "the buffer a batch_size >= 1 (the number of episodes drawn per sample)."
            )
        _check_anchors(time, lanes, view)
        trajectories = self._trajectories.lookup(storage, self)
        index, info = self._tape_builder.build(
            view, time, lanes, anchors, info, trajectories, owner
        )
        self._priority_calls.install_on_buffers_of(storage)
        return index, info

    # -- trajectory ids ----------------------------------------------------------------------

    def mark_update(self, index: torch.Tensor | int, *, storage: Storage | None = None) -> None:
        """Called by the buffer's writer after each write; keeps the trajectory index current."""
        self._trajectories.mark_update(index)

    # -- priorities --------------------------------------------------------------------------

    def reduce_priority(
        self, sample: Any, priority: torch.Tensor
    ) -> tuple[torch.Tensor | tuple[torch.Tensor, ...], torch.Tensor]:
        """Reduces per-record priorities of a sample to one priority per episode, per record.

        Each episode (the records sharing a ``"sequence_id"`` >= 0) is reduced over its valid
        records with :attr:`priority_reduction`; every record of the episode gets the result.
        A record laid out in several episodes of the sample keeps the largest.

        Args:
            sample (TensorDict or dict): the sample (or the info ``rb.sample(return_info=True)``
                returns) with ``"index"``, ``"sequence_id"`` and ``"validity_mask"``.
            priority (torch.Tensor): one priority per record, shaped like the sample.

        Returns:
            ``(records, priorities)`` for ``rb.update_priority``.

        Raises:
            ValueError: if a valid record's priority is NaN, infinite or negative (the message
                names the record), ``priority`` does not hold one value per record, or the
                sample has no ``"index"``.
        """
        return reduce_episode_priorities(
            sample, priority, self.priority_reduction, self.priority_eta
        )

    def update_priority(
        self, buffer: Any, sample: Any, priority: torch.Tensor | None = None
    ) -> None:
        """Reduces a sample's per-record priorities per episode and writes them to its records.

        Reduces with :meth:`reduce_priority`, then calls the buffer's public
        ``update_priority(records, priorities)``. NaN, infinite or negative priorities of
        valid records are refused before the buffer is touched.

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
            >>> from torchrl_ext import Tape
            >>> done = torch.tensor([False, True] * 4).unsqueeze(-1)  # 4 episodes of 2
            >>> unit = Tape(length=4, priority_reduction="mean")
            >>> rb = TensorDictPrioritizedReplayBuffer(
            ...     alpha=1.0, beta=1.0, storage=LazyTensorStorage(8), sample_unit=unit,
            ...     batch_size=2, generator=torch.Generator().manual_seed(0),
            ... )
            >>> _ = rb.extend(TensorDict({("next", "done"): done}, [8]))
            >>> sample = rb.sample()
            >>> sample["index"].tolist()  # two episodes: records 2-3 and 6-7
            [2, 3, 6, 7]
            >>> sample["td_error"] = torch.tensor([1.0, 3.0, 0.0, 2.0])
            >>> unit.reduce_priority(sample, sample["td_error"])  # episode means, per record
            (tensor([2, 3, 6, 7]), tensor([2., 2., 1., 1.]))
            >>> unit.update_priority(rb, sample)  # writes them to those four records
        """
        priority = _priority_to_write(buffer, sample, priority)
        buffer.update_priority(*self.reduce_priority(sample, priority))

    def route_priority_calls(self, buffer: Any) -> None:
        """Routes TorchRL's priority calls of ``buffer`` through this unit.

        As :meth:`Sequence.route_priority_calls`: done the first time the unit samples for
        ``buffer``; ``rb.update_tensordict_priority(sample)`` then writes tape samples with
        :meth:`update_priority` (TorchRL's own method would write each record's priority
        unreduced, tails included), and ``rb.update_priority`` refuses NaN, infinite or
        negative priorities.

        Args:
            buffer (ReplayBuffer): a buffer built with ``sample_unit=`` this unit.

        Raises:
            ValueError: if ``buffer`` does not sample through this unit.
        """
        self._priority_calls.install(buffer)

    def restore_priority_calls(self, buffer: Any) -> None:
        """Gives ``buffer`` back TorchRL's own priority methods, for good.

        Args:
            buffer (ReplayBuffer): a buffer that samples (or sampled) through this unit.
        """
        self._priority_calls.restore(buffer)

    # -- misc --------------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        return _state_to_pickle(self.__dict__, "_tape_builder")

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._priority_calls = PriorityCalls(self)

    def __repr__(self) -> str:
        keys = f"traj_key={self.traj_key!r}" if self.traj_key else f"done_key={self.done_key!r}"
        return (
            f"Tape(length={self.length}, rows={self.rows}, {keys}, "
            f"priority_reduction={self.priority_reduction!r})"
        )


# -- the units' settings: validated together, fixed afterwards ------------------------------------

_BOUNDARIES = ("pad", "stop", "include_reset")
_LAYOUTS = ("flat", "batch_time")
_REDUCTIONS = ("max", "mean", "mixture")
_MAX_REACH = 2**31 - 1
_Spec = TypeVar("_Spec")


class _Setting:
    """A setting fixed at construction: read like an attribute, refused on assignment.

    Window geometry, keys and priority settings are validated together in ``__init__`` and
    cached tables depend on them, so a changed setting means a new unit.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, unit: Any, owner: type | None = None) -> Any:
        if unit is None:
            return self
        return unit._config[self.name]

    def __set__(self, unit: Any, value: Any) -> None:
        self.refuse(unit, self.name, value)

    @staticmethod
    def refuse(unit: Any, name: str, value: Any) -> None:
        """Raises the :class:`AttributeError` of an assignment to the setting ``name``.

        Args:
            unit (Any): the unit assigned to.
            name (str): the setting's name.
            value (Any): the value assigned.
        """
        raise AttributeError(
            f"{type(unit).__name__}.{name} is fixed at construction (it is validated with the "
            f"other settings and cached); build a new unit instead, e.g. "
            f"{type(unit).__name__}(..., {name}={value!r})."
        )


def _spec_of(spec: type[_Spec], settings: Mapping[str, Any]) -> _Spec:
    """What a builder's spec (a dataclass) holds of a unit's settings: its fields, by name.

    Args:
        spec (type): :class:`~torchrl_ext.data._windows.WindowSpec` or
            :class:`~torchrl_ext.data._tapes.TapeSpec`.
        settings (Mapping): the unit's validated settings (its ``_config``).
    """
    return spec(**{field.name: settings[field.name] for field in dataclasses.fields(spec)})


def _check_settings(
    length: int,
    episode_boundary: str,
    done_key: NestedKey | None,
    burn_in: int,
    bootstrap: int,
    stride: int | None,
    dilation: int | None,
    traj_key: NestedKey | None,
    layout: str,
    priority_reduction: str,
    priority_eta: float,
    priority_learning_only: bool,
    is_init_key: NestedKey,
) -> dict[str, Any]:
    """Validates the arguments of :class:`~torchrl_ext.data.Sequence` together.

    Args:
        length (int): records in the learning region.
        episode_boundary (str): ``"pad"``, ``"stop"`` or ``"include_reset"``.
        done_key (NestedKey or None): stored flag that ends an episode.
        burn_in (int): records before the anchor.
        bootstrap (int): records after the learning region.
        stride (int or None): storage records between consecutive window records.
        dilation (int or None): torchrl's name for ``stride``.
        traj_key (NestedKey or None): stored trajectory id.
        layout (str): ``"flat"`` or ``"batch_time"``.
        priority_reduction (str): ``"max"``, ``"mean"`` or ``"mixture"``.
        priority_eta (float): weight of the max in ``"mixture"``.
        priority_learning_only (bool): reduce priorities over learning records only.
        is_init_key (NestedKey): where ``layout="batch_time"`` writes its reset flags.

    Returns:
        The settings by name, normalised (``dilation`` given as ``stride``).

    Raises:
        TypeError: for an argument of the wrong type.
        ValueError: for a value out of range, an unknown choice, ``stride`` and ``dilation``
            that disagree, a window that reaches too far, or ``traj_key`` with
            ``episode_boundary="include_reset"``.
    """
    stride = _resolve_stride(stride, dilation)
    length = check_int("length", length, minimum=1)
    burn_in = check_int("burn_in", burn_in, minimum=0)
    bootstrap = check_int("bootstrap", bootstrap, minimum=0)
    _check_reach(burn_in, length, bootstrap, stride)
    done_key = check_key("done_key", done_key, optional=True)
    traj_key = check_key("traj_key", traj_key, optional=True)
    if traj_key is not None and episode_boundary == "include_reset":
        raise ValueError(
            "episode_boundary='include_reset' crosses episodes in storage order, which "
            f"trajectory ids do not define; got traj_key={traj_key!r}. Use done_key= "
            "with include_reset, or 'pad'/'stop' with traj_key."
        )
    return {
        "length": length,
        "episode_boundary": check_choice("episode_boundary", episode_boundary, _BOUNDARIES),
        "done_key": done_key,
        "traj_key": traj_key,
        "burn_in": burn_in,
        "bootstrap": bootstrap,
        "stride": stride,
        "layout": check_choice("layout", layout, _LAYOUTS),
        "priority_reduction": check_choice("priority_reduction", priority_reduction, _REDUCTIONS),
        "priority_eta": check_float("priority_eta", priority_eta, 0.0, 1.0),
        "priority_learning_only": check_bool("priority_learning_only", priority_learning_only),
        "is_init_key": check_key("is_init_key", is_init_key),
    }


def _resolve_stride(stride: Any, dilation: Any) -> int:
    """``stride``, or ``dilation`` (torchrl's name for it) when only that is given.

    Args:
        stride (Any): the ``stride`` argument.
        dilation (Any): the ``dilation`` argument.

    Raises:
        ValueError: if both are given and differ.
    """
    if stride is not None and dilation is not None and stride != dilation:
        raise ValueError(
            f"stride and dilation are two names for one setting; got stride={stride!r} and "
            f"dilation={dilation!r}. Pass only one."
        )
    if stride is None and dilation is not None:
        return check_int("dilation", dilation, minimum=1)
    return check_int("stride", 1 if stride is None else stride, minimum=1)


def _check_reach(burn_in: int, length: int, bootstrap: int, stride: int) -> None:
    """Windows are laid out with 32-bit offsets: their reach must fit in ``2**31 - 1``."""
    reach = (burn_in + length + bootstrap) * stride
    if reach > _MAX_REACH:
        raise ValueError(
            f"a window reaches (burn_in + length + bootstrap) * stride = {reach} records, more "
            f"than {_MAX_REACH}; got burn_in={burn_in}, length={length}, bootstrap={bootstrap}, "
            f"stride={stride}."
        )


def _check_tape_settings(
    length: int,
    rows: int | None,
    done_key: NestedKey | None,
    traj_key: NestedKey | None,
    priority_reduction: str,
    priority_eta: float,
    is_init_key: NestedKey,
) -> dict[str, Any]:
    """Validates the arguments of :class:`~torchrl_ext.data.Tape` together.

    Args:
        length (int): records per tape.
        rows (int or None): tapes per sample, or ``None`` for one tape without a row dim.
        done_key (NestedKey or None): stored flag that ends an episode.
        traj_key (NestedKey or None): stored trajectory id.
        priority_reduction (str): ``"max"``, ``"mean"`` or ``"mixture"``.
        priority_eta (float): weight of the max in ``"mixture"``.
        is_init_key (NestedKey): where the reset flags are written.

    Returns:
        The settings by name, normalised.

    Raises:
        TypeError: for an argument of the wrong type.
        ValueError: for a value out of range or an unknown choice.
    """
    length = check_int("length", length, minimum=1, maximum=_MAX_REACH // 2)
    return {
        "length": length,
        "rows": None if rows is None else check_int("rows", rows, minimum=1),
        "done_key": check_key("done_key", done_key, optional=True),
        "traj_key": check_key("traj_key", traj_key, optional=True),
        "priority_reduction": check_choice("priority_reduction", priority_reduction, _REDUCTIONS),
        "priority_eta": check_float("priority_eta", priority_eta, 0.0, 1.0),
        "is_init_key": check_key("is_init_key", is_init_key),
    }


# -- what Sequence.expand and Tape.expand read and check before any record is laid out -----------

#: Per-record info entries every ``Sequence`` sample carries.
_RECORD_KEYS = ("sequence_id", "step_in_sequence", "validity_mask", "learning_mask", "anchor_index")
#: Per-record info entries every ``Tape`` sample carries (besides its ``is_init_key``).
_TAPE_KEYS = ("sequence_id", "step_in_sequence", "validity_mask", "anchor_index")


def _read_storage(
    storage: Any,
    done_key: NestedKey | None,
    owner: str,
    known: tuple[Any, torch.Tensor | None] | None,
    layout: str,
    is_init_key: NestedKey,
    record_keys: tuple[str, ...] = _RECORD_KEYS,
) -> tuple[_episodes.Snapshot, tuple[Any, torch.Tensor | None]]:
    """Everything a sample reads from the storage, read here and nowhere else.

    The done flags and the check of stored keys are kept while the storage's contents are
    the same object (writes happen in place), so they are looked up once per storage.

    Args:
        storage (Storage): the buffer's storage.
        done_key (NestedKey or None): the done flags to read (``None``: none).
        owner (str): the unit's class name, for messages.
        known (tuple, optional): ``(contents, done flags)`` of the unit's last read.
        layout (str): the unit's ``layout`` (``"batch_time"`` for a :class:`Tape`).
        is_init_key (NestedKey): the unit's ``is_init_key``.
        record_keys (tuple of str, optional): the per-record info entries the unit writes.
            Defaults to :class:`Sequence`'s.

    Returns:
        ``(view, known)``: the :class:`~torchrl_ext.data._episodes.Snapshot` and what the unit
        keeps for its next read.
    """
    view = _episodes.snapshot(storage, done_key, owner, known)
    if known is None or known[0] is not view.contents:
        _check_collisions(view.contents, layout, is_init_key, record_keys)
        known = (view.contents, view.flags)
    return view, known


def _split_anchors(
    index: torch.Tensor | tuple, ndim: int
) -> tuple[torch.Tensor, tuple[torch.Tensor, ...], torch.Tensor]:
    """Returns anchor time coordinates, lane coordinates and the anchors as one tensor.

    Args:
        index (torch.Tensor or tuple of torch.Tensor): the anchors, as ``Sequence.expand``
            takes them.
        ndim (int): the storage's number of dims.

    Raises:
        ValueError: if the anchors do not have one coordinate per storage dim.
        TypeError: if a coordinate is not an integer tensor.
    """
    if isinstance(index, tuple):
        coords = tuple(torch.as_tensor(c).reshape(-1) for c in index)
    else:
        index = torch.as_tensor(index)
        if ndim > 1 and index.ndim == 2 and index.shape[-1] == ndim:
            coords = tuple(index.unbind(-1))
        else:
            coords = (index.reshape(-1),)
    if len(coords) != ndim:
        raise ValueError(
            f"anchors must have one coordinate per storage dim ({ndim}), got {len(coords)}."
        )
    for coord in coords:
        if coord.is_floating_point() or coord.is_complex() or coord.dtype is torch.bool:
            raise TypeError(
                f"anchors must be integer storage indices, got index of dtype {coord.dtype}."
            )
    coords = tuple(c.long() for c in coords)
    anchors = torch.stack(coords, -1) if ndim > 1 else coords[0]
    return coords[0], coords[1:], anchors


def _check_anchors(
    time: torch.Tensor, lanes: tuple[torch.Tensor, ...], view: _episodes.Snapshot
) -> None:
    """Raises ``IndexError`` unless every anchor addresses a written record.

    Args:
        time (torch.Tensor): the anchors' time coordinates ``[B]``.
        lanes (tuple of torch.Tensor): their lane coordinates ``[B]``, one per lane dim.
        view (Snapshot): what the sample reads from the storage.
    """
    if not time.numel():
        return
    sizes = (view.written, *view.lanes)
    names = ("time", *(f"lane {d}" for d in range(len(lanes))))
    for name, coord, size in zip(names, (time, *lanes), sizes, strict=True):
        low, high = (int(v) for v in torch.aminmax(coord))
        if low < 0 or high >= size:
            bad = low if low < 0 else high
            raise IndexError(
                f"anchor {name} coordinate {bad} is out of range: the storage holds {size} "
                f"written {'steps' if name == 'time' else 'lanes'} (valid coordinates 0 .. "
                f"{size - 1}). Anchors must come from the buffer's sampler or address written "
                "records."
            )


def _check_collisions(
    contents: Any,
    layout: str,
    is_init_key: NestedKey,
    record_keys: tuple[str, ...] = _RECORD_KEYS,
) -> None:
    """Refuses stored entries that the sample's per-record info would overwrite.

    TensorDict buffers write every info entry into the sample, so a stored entry under one
    of those keys would silently be replaced. The one exception is a stored reset flag
    under ``is_init_key`` (one bool per record, as collectors and envs write it): the
    window's flags supersede it by design, since a recurrent module must also reset where
    each window starts.

    Args:
        contents (TensorDictBase): the storage's contents.
        layout (str): the unit's ``layout``.
        is_init_key (NestedKey): the unit's ``is_init_key``.
        record_keys (tuple of str, optional): the unit's other per-record info entries.
            Defaults to :class:`Sequence`'s.

    Raises:
        ValueError: if a stored entry would be overwritten.
    """
    stored = {_plain_key(k) for k in contents.keys(include_nested=True)}
    outputs = [(k, k) for k in record_keys]
    if layout == "batch_time":
        outputs.append(("is_init_key", is_init_key))
    for role, key in outputs:
        key = _plain_key(key)
        if key in stored and not (role == "is_init_key" and _is_flag(contents, key)):
            raise ValueError(
                f"the storage holds an entry {key!r}, which every sample's {role!r} info "
                "entry would overwrite. Rename the stored entry"
                + (", or pass another is_init_key=." if role == "is_init_key" else ".")
            )


def _plain_key(key: NestedKey) -> NestedKey:
    """``("a",)`` and ``"a"`` name the same entry."""
    return key[0] if isinstance(key, tuple) and len(key) == 1 else key


def _is_flag(contents: Any, key: NestedKey) -> bool:
    """Whether a stored entry holds one bool per record (a reset flag)."""
    entry = contents.get(key)
    if not isinstance(entry, torch.Tensor) or entry.dtype is not torch.bool:
        return False
    shape = tuple(entry.shape)
    batch = tuple(contents.batch_size)
    return shape == batch or shape == (*batch, 1)


# -- what a unit pickles ------------------------------------------------------------------------


def _state_to_pickle(state: dict[str, Any], cached_builder: str) -> dict[str, Any]:
    """A unit's attributes as pickled: without what it rebuilds when next used.

    That is its cached builder (rebuilt from the settings), its last storage read and the
    routes of its buffers' priority calls (rebuilt by ``__setstate__``); its trajectory index
    holder pickles itself without the index.

    Args:
        state (dict): the unit's ``__dict__``.
        cached_builder (str): the name of the unit's cached builder.
    """
    state = state.copy()
    state.pop(cached_builder, None)
    state["_known"] = None
    state["_priority_calls"] = None
    return state


# -- what Sequence.update_priority writes ---------------------------------------------------------


def _priority_to_write(buffer: Any, sample: Any, priority: torch.Tensor | None) -> Any:
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


# every constructor argument reads back as a fixed setting: ``unit.length``, ``unit.layout``, ...
for _name in (
    "length", "episode_boundary", "done_key", "traj_key", "burn_in", "bootstrap", "stride",
    "layout", "priority_reduction", "priority_eta", "priority_learning_only", "is_init_key",
):  # fmt: skip
    setattr(Sequence, _name, _Setting(_name))
for _name in (
    "length", "rows", "done_key", "traj_key", "priority_reduction", "priority_eta", "is_init_key",
):  # fmt: skip
    setattr(Tape, _name, _Setting(_name))
del _name
