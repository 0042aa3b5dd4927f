"""Episode boundaries around sampled anchors, read in O(B * window) per sample.

Two sources of boundaries are supported:

- **Storage order with done flags** (:func:`reach_in_storage_order`): an episode ends at every
  record whose done flag is set, and the ring buffer's write seam (between the newest and the
  oldest record) and unwritten slots end every trajectory. Nothing is indexed ahead of time: the
  flags are gathered only inside each anchor's reach, straight from the storage, so a sample costs
  the same right after a write as it does on static data, whatever the capacity.
- **Trajectory ids** (:class:`TrajectoryIndex`): records carrying the same id form one trajectory,
  in write order, even when trajectories are interleaved in storage. A per-slot doubly linked list
  is kept up to date incrementally as the buffer's writer reports writes (``mark_update``).
  A unit holds its index through :class:`TrajectoryIds`, which builds it for the storage the
  unit samples from and passes the writer's reports on.

Both produce a :class:`Reach`: for each anchor, the storage time coordinate of every record at a
relative step ``j`` in ``[-back, forward]`` and how far the anchor's episode extends each way.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from tensordict import is_tensor_collection
from tensordict.utils import NestedKey
from torchrl.data.replay_buffers.storages import Storage, TensorStorage

from torchrl_ext._compat import (
    storage_attached_entities,
    storage_contents,
    storage_last_write,
    storage_mutation_revision,
    writer_cursor,
)


@dataclass
class Reach:
    """What the window builder needs to know around each anchor.

    Columns ``0 .. back + forward`` stand for the relative steps ``-back .. forward`` around each
    anchor.

    Attributes:
        back (int): steps before the anchor that column 0 stands for.
        to_start (torch.Tensor): ``[B]`` steps from the anchor back to its episode's first record
            (capped at ``back``).
        to_stop (torch.Tensor): ``[B]`` steps from the anchor forward to its episode's last
            record (capped at ``forward``).
        episode (torch.Tensor or None): ``[B, columns]`` running episode counter (changes right
            after each episode end); ``None`` when no boundary lies between reachable records.
        base (torch.Tensor or None): ``[B]`` storage time of column 0 (storage-order reaches).
        written (int): records written along time; positions wrap modulo this.
        wraps (bool): whether some column's position passes the end of the storage.
        chain (torch.Tensor or None): ``[B, columns]`` storage times of each column
            (trajectory-id reaches, where records of a trajectory need not be adjacent).
    """

    back: int
    to_start: torch.Tensor
    to_stop: torch.Tensor
    episode: torch.Tensor | None = None
    base: torch.Tensor | None = None
    written: int = 0
    wraps: bool = False
    chain: torch.Tensor | None = None

    def positions(self, column: torch.Tensor) -> torch.Tensor:
        """Storage time coordinates of the records at ``column`` (``[B, K]``)."""
        if self.chain is not None:
            return self.chain.gather(1, column.long())
        positions = self.base.unsqueeze(1) + column
        return torch.remainder(positions, self.written) if self.wraps else positions

    def positions_of(self, anchor: torch.Tensor, column: torch.Tensor) -> torch.Tensor:
        """Storage time coordinates of single records: ``column`` of the reach of ``anchor``.

        Args:
            anchor (torch.Tensor): each record's anchor (its row of the reach), any shape.
            column (torch.Tensor): each record's column, shaped like ``anchor``.
        """
        if self.chain is not None:
            return self.chain[anchor, column]
        positions = self.base[anchor] + column
        return torch.remainder(positions, self.written) if self.wraps else positions


class Snapshot(NamedTuple):
    """What a sample reads from the storage, read once before any window is built."""

    contents: Any  # the stored TensorDict (written in place: the same object between samples)
    lanes: tuple[int, ...]  # sizes of the storage dims after time
    written: int  # time steps holding at least one written record
    oldest: int  # time coordinates of the oldest and the newest record
    newest: int
    flags: torch.Tensor | None  # stored done flags [capacity, *lanes] (a view), or None


def snapshot(
    storage: Storage, done_key: NestedKey | None, owner: str, known: tuple | None = None
) -> Snapshot:
    """Reads the contents, the write seam and the done flags of a TensorDict-backed storage.

    Args:
        storage (Storage): the storage a sample is drawn from.
        done_key (NestedKey or None): the stored done flags to read, or ``None``.
        owner (str): the caller's name, for error messages.
        known (tuple, optional): ``(contents, flags)`` of an earlier snapshot; its flags are
            reused while the contents are the same object.

    Raises:
        TypeError: if the storage is not a TensorDict-backed ``TensorStorage``.
        RuntimeError: if the storage is empty.
        ValueError: see :func:`read_flags`.
    """
    if not isinstance(storage, TensorStorage):
        raise TypeError(
            f"{owner} needs a TensorDict-backed TensorStorage (LazyTensorStorage, "
            f"LazyMemmapStorage, ...) to read episode boundaries, got "
            f"storage={type(storage).__name__}."
        )
    contents = storage_contents(storage)
    if contents is not None and not is_tensor_collection(contents):
        raise TypeError(
            f"{owner} needs the storage to hold TensorDict data, but it holds "
            f"{type(contents).__name__}; extend the buffer with TensorDicts."
        )
    if contents is None or len(storage) == 0:
        raise RuntimeError(f"{owner} cannot expand anchors from an empty storage.")
    written, oldest, newest = seam(storage)
    flags = None
    if done_key is not None:
        if known is not None and known[0] is contents:
            flags = known[1]
        else:
            flags = read_flags(storage, done_key, owner)
    lanes = tuple(contents.batch_size[1 : storage.ndim])
    return Snapshot(contents, lanes, written, oldest, newest, flags)


def read_flags(storage: TensorStorage, key: NestedKey, owner: str) -> torch.Tensor:
    """Returns the stored per-record entry ``key`` without copying, trailing singletons dropped.

    Raises:
        ValueError: if the storage has no entry ``key`` (the message lists the keys it has), or
            the entry holds more than one value per record.
    """
    contents = storage_contents(storage)
    flags = contents.get(key, None)
    if flags is None:
        keys = sorted(str(k) for k in contents.keys(include_nested=True, leaves_only=True))
        raise ValueError(
            f"{owner}: the storage has no entry {key!r} to read episode boundaries from; "
            f"stored keys are {keys}. Pass the right done_key= (or traj_key=)."
        )
    ndim = storage.ndim
    while flags.ndim > ndim and flags.shape[-1] == 1:
        flags = flags.squeeze(-1)
    if flags.ndim != ndim:
        raise ValueError(
            f"{owner}: entry {key!r} must hold one value per record, got a stored shape "
            f"{tuple(flags.shape)} for a storage with {ndim} batch dim(s)."
        )
    return flags


#: Per storage: its last-write record, its writers' cursors and the newest slot, as last read.
_LAST_READ: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def seam(storage: TensorStorage) -> tuple[int, int, int]:
    """Returns ``(written, oldest, newest)`` time coordinates of a ring-buffer storage."""
    length = len(storage)  # one length read: it takes a lock
    total = storage_contents(storage).batch_size[: storage.ndim]
    if length != storage.max_size:  # not full: written from slot 0 on
        written = -(length // -total[1:].numel())  # time steps holding at least one record
        return written, 0, written - 1
    written = int(total[0])
    newest = _newest_slot(storage, written)
    return written, (newest + 1) % written, newest


def _newest_slot(storage: TensorStorage, written: int) -> int:
    """The slot of a full storage written last.

    The storage records the slot of each write, but ``loads`` and ``load_state_dict`` restore
    the contents without it, so after a restore into a used buffer that record is stale; the
    buffers' writers keep their cursor (the next slot to write) in their checkpoints. The
    storage's record is trusted while an attached writer agrees with it, or when it moved
    since the last read while the writers did not (a write straight into the storage);
    otherwise the writer's cursor is.
    """
    cursor = storage_last_write(storage)
    cursor = None if cursor is None else int(cursor) % written
    writers = tuple(_writer_cursors(storage))
    seen = _LAST_READ.get(storage)
    if seen is not None and seen[:2] == (cursor, writers):
        return seen[2]  # nothing moved since the last read
    by_writer = [(c - 1) % written for c in writers]
    written_directly = seen is not None and seen[0] != cursor and seen[1] == writers
    if cursor is None:
        newest = by_writer[0] if by_writer else written - 1
    elif not by_writer or cursor in by_writer or written_directly:
        newest = cursor
    else:
        newest = by_writer[0]
    _LAST_READ[storage] = (cursor, writers, newest)
    return newest


def _writer_cursors(storage: TensorStorage) -> list[int]:
    """The cursors (next slot to write) of the round-robin writers of attached buffers."""
    cursors = []
    for entity in storage_attached_entities(storage):
        cursor = writer_cursor(getattr(entity, "writer", None))
        if isinstance(cursor, int):
            cursors.append(cursor)
    return cursors


def reach_in_storage_order(
    view: Snapshot,
    flags: torch.Tensor | None,
    time: torch.Tensor,
    lanes: tuple[torch.Tensor, ...],
    back: int,
    forward: int,
    crosses_episodes: bool,
) -> Reach:
    """Builds the reach of every anchor from storage order and (optionally) done flags.

    Args:
        view (Snapshot): what the sample read from the storage.
        flags (torch.Tensor or None): stored done flags (``[capacity, *lanes]``), or ``None``
            when the written span is one trajectory.
        time (torch.Tensor): ``[B]`` anchor time coordinates.
        lanes (tuple of torch.Tensor): the anchors' other storage coordinates (empty for 1-D).
        back (int): steps to read before each anchor.
        forward (int): steps to read after each anchor.
        crosses_episodes (bool): ``True`` for ``include_reset``: done flags only mark where a
            new episode starts inside the window; only the write seam bounds the reach.
    """
    written, oldest, newest = view.written, view.oldest, view.newest
    span = back + forward + 1
    base = torch.remainder(time - back, written)
    wraps = span > written or int(base.max()) + span > written
    to_stop = torch.remainder(newest - time, written).clamp_(max=forward)
    to_start = torch.remainder(time - oldest, written).clamp_(max=back)
    reach = Reach(back, to_start, to_stop, None, base, written, wraps)
    if flags is None:
        return reach
    ends = _read_span(flags, reach, span, lanes)
    if crosses_episodes:
        reach.episode = torch.cumsum(ends, 1, dtype=torch.int32) - ends.to(torch.int32)
        return reach
    # the first end at or after the anchor closes its episode, the last end before it opens it
    distance = torch.where(ends, _end_distances(back, forward, time.device), span)
    if back:
        torch.minimum(to_start, distance[:, :back].amin(1), out=to_start)
    torch.minimum(to_stop, distance[:, back:].amin(1), out=to_stop)
    return reach


def _read_span(
    flags: torch.Tensor, reach: Reach, span: int, lanes: tuple[torch.Tensor, ...]
) -> torch.Tensor:
    """Reads the done flags of every column of every anchor's reach, as ``[B, span]`` bool."""
    device = reach.base.device
    index = reach.positions(torch.arange(span, device=device).expand(len(reach.base), span))
    index = index.to(flags.device)
    coords = tuple(lane.to(flags.device).unsqueeze(1).expand_as(index) for lane in lanes)
    out = flags[(index, *coords)]
    if out.is_floating_point() and not bool(torch.isfinite(out).all()):
        raise ValueError(
            f"done flags must be finite, got {out[~torch.isfinite(out)][0].item()!r} among the "
            "stored flags a sampled window reads. Store bool done flags."
        )
    if out.dtype is not torch.bool:
        out = out != 0
    return out.to(device)


def _end_distances(back: int, forward: int, device: torch.device) -> torch.Tensor:
    """What an episode end at each column implies for the anchor at column ``back``.

    An end at relative step ``j >= 0`` stops the episode ``j`` steps after the anchor; an end at
    ``j < 0`` starts it ``-j - 1`` steps before.
    """
    rel = torch.arange(-back, forward + 1, device=device)
    return torch.where(rel < 0, -rel - 1, rel)


class TrajectoryIndex:
    """Per-slot links between consecutive records of the same trajectory, kept incrementally.

    Slot ``p`` links back to the slot written just before it with the same trajectory id and
    forward to the one written just after. A link is live only while both ends still hold the
    records it was made for: each slot carries the serial number of its last write, and each link
    remembers the serial of its target, so overwritten records drop out of every chain without
    any sweep over the storage.
    """

    def __init__(self, storage: TensorStorage, traj_key: NestedKey, owner: str) -> None:
        if storage.ndim != 1:
            raise ValueError(
                f"{owner}: traj_key= works with 1-D storages; got a storage with "
                f"ndim={storage.ndim}. For time x lane storages use done_key=."
            )
        self.storage = storage
        self.traj_key = traj_key
        self.owner = owner
        self._lock = threading.RLock()
        capacity = storage.max_size
        self.serial = torch.full((capacity,), -1, dtype=torch.long)
        self.prev = torch.full((capacity,), -1, dtype=torch.long)
        self.prev_serial = torch.full((capacity,), -2, dtype=torch.long)
        self.next = torch.full((capacity,), -1, dtype=torch.long)
        self.next_serial = torch.full((capacity,), -2, dtype=torch.long)
        self._tails: dict[int, tuple[int, int]] = {}
        self._count = 0
        self._revision = None

    def rebuild(self) -> None:
        """Re-reads every written record, oldest first (after loads, empties or direct writes)."""
        with self._lock:
            written, oldest, _ = seam(self.storage)
            order = torch.remainder(torch.arange(written) + oldest, written)
            self._ids(order)  # refuse bad ids before the links are cleared
            self.serial.fill_(-1)
            self.prev.fill_(-1)
            self.next.fill_(-1)
            self.prev_serial.fill_(-2)
            self.next_serial.fill_(-2)
            self._tails.clear()
            self._count = 0
            self._link(order)
            self._revision = storage_mutation_revision(self.storage)

    def mark_update(self, index: torch.Tensor | int) -> None:
        """Links newly written slots (called by the buffer's writer after every write)."""
        with self._lock:
            if self._revision is None:
                return
            index = torch.as_tensor(index, dtype=torch.long).reshape(-1).cpu()
            self._link(index)
            self._revision = storage_mutation_revision(self.storage)

    def is_stale(self) -> bool:
        """``True`` when the storage changed in a way this index was not told about."""
        return self._revision is None or self._revision != storage_mutation_revision(self.storage)

    def _link(self, slots: torch.Tensor) -> None:
        if slots.numel() == 0:
            return
        slots = self._last_writes(slots)
        ids = self._ids(slots)
        serials = torch.arange(self._count, self._count + slots.numel())
        self._count += slots.numel()
        self.serial[slots] = serials
        self.next[slots] = -1
        order = torch.sort(ids, stable=True).indices
        s_slots, s_ids, s_serials = slots[order], ids[order], serials[order]
        same = s_ids[1:] == s_ids[:-1]
        self._set_links(
            s_slots[:-1][same], s_slots[1:][same], s_serials[:-1][same], s_serials[1:][same]
        )
        firsts = torch.ones_like(s_ids, dtype=torch.bool)
        firsts[1:] = ~same
        self._link_to_tails(s_slots[firsts], s_ids[firsts], s_serials[firsts])
        lasts = torch.ones_like(s_ids, dtype=torch.bool)
        lasts[:-1] = ~same
        for slot, tid, ser in zip(
            s_slots[lasts].tolist(), s_ids[lasts].tolist(), s_serials[lasts].tolist(), strict=True
        ):
            self._tails[tid] = (slot, ser)
        if len(self._tails) > 4 * self.serial.numel():
            self._prune_tails()

    def _ids(self, slots: torch.Tensor) -> torch.Tensor:
        """The stored trajectory ids of ``slots`` as int64, refusing ids that are not integers.

        Float ids are accepted only when every value is a finite whole number; anything else
        would merge distinct trajectories when cast.
        """
        stored = read_flags(self.storage, self.traj_key, self.owner)
        ids = torch.as_tensor(stored[slots.to(stored.device)]).reshape(-1)
        if ids.dtype is torch.bool or ids.is_complex():
            raise TypeError(
                f"{self.owner}: trajectory ids under traj_key={self.traj_key!r} must be "
                f"integers, got dtype {ids.dtype}."
            )
        if ids.is_floating_point():
            whole = torch.isfinite(ids) & (ids == ids.round())
            if not bool(whole.all()):
                bad = ids[~whole][0].item()
                raise ValueError(
                    f"{self.owner}: trajectory ids under traj_key={self.traj_key!r} must be "
                    f"whole numbers, got {bad!r}. Store integer ids."
                )
        return ids.to(torch.long).cpu()

    def _last_writes(self, slots: torch.Tensor) -> torch.Tensor:
        """Drops writes that a later write of the same batch overwrote (a wrapping extend)."""
        unique, inverse = torch.unique(slots, return_inverse=True)
        if unique.numel() == slots.numel():
            return slots
        order = torch.arange(slots.numel())
        last = torch.full((unique.numel(),), -1, dtype=torch.long)
        last.scatter_reduce_(0, inverse, order, reduce="amax")
        return slots[last[inverse] == order]

    def _set_links(self, src, dst, src_serial, dst_serial) -> None:
        self.next[src] = dst
        self.next_serial[src] = dst_serial
        self.prev[dst] = src
        self.prev_serial[dst] = src_serial

    def _link_to_tails(self, slots, ids, serials) -> None:
        self.prev[slots] = -1
        for slot, tid, ser in zip(slots.tolist(), ids.tolist(), serials.tolist(), strict=True):
            tail = self._tails.get(tid)
            if tail is not None and int(self.serial[tail[0]]) == tail[1]:
                self._set_links(
                    torch.tensor([tail[0]]),
                    torch.tensor([slot]),
                    torch.tensor([tail[1]]),
                    torch.tensor([ser]),
                )

    def _prune_tails(self) -> None:
        self._tails = {
            tid: (slot, ser)
            for tid, (slot, ser) in self._tails.items()
            if int(self.serial[slot]) == ser
        }

    def reach(self, time: torch.Tensor, back: int, forward: int) -> Reach:
        """Follows each anchor's trajectory ``back`` steps backward and ``forward`` forward."""
        with self._lock:
            anchors = time.cpu()
            ahead, to_stop = self._walk(anchors, forward, self.next, self.next_serial)
            behind, to_start = self._walk(anchors, back, self.prev, self.prev_serial)
        chain = torch.cat([behind.flip(1), anchors.unsqueeze(1), ahead], 1)
        device = time.device
        return Reach(back, to_start.to(device), to_stop.to(device), chain=chain.to(device))

    def _walk(self, start, steps, link, link_serial) -> tuple[torch.Tensor, torch.Tensor]:
        """Follows ``link`` up to ``steps`` times; dead ends repeat the last live slot."""
        out = torch.empty(start.shape[0], steps, dtype=torch.long)
        reached = torch.zeros_like(start)
        current = start.clone()
        alive = torch.ones_like(start, dtype=torch.bool)
        for j in range(steps):
            nxt = link[current]
            ok = alive & (nxt >= 0)
            ok &= self.serial[nxt.clamp(min=0)] == link_serial[current]
            current = torch.where(ok, nxt, current)
            reached += ok
            alive = ok
            out[:, j] = current
            if not bool(alive.any()):  # every walk ended: the rest repeats where each stopped
                out[:, j + 1 :] = current.unsqueeze(1)
                break
        return out, reached


class TrajectoryIds:
    """A unit's trajectory index: built for the storage it samples, kept current by its writes.

    Holds at most one :class:`TrajectoryIndex`, for the storage the unit last sampled from. The
    index is built on first use (and rebuilt when stale); the unit is attached to that storage
    then, so that the buffer's writer reports every write to the unit's ``mark_update``, which
    passes it on to :meth:`mark_update`. Pickled without the index, which is rebuilt on the
    next sample.

    Args:
        traj_key (NestedKey or None): the stored trajectory id; ``None`` when the unit reads
            done flags (no index is ever built then).
        owner (str): the unit's class name, for messages.
    """

    def __init__(self, traj_key: NestedKey | None, owner: str) -> None:
        self.traj_key = traj_key
        self.owner = owner
        self._index: TrajectoryIndex | None = None
        self._lock = threading.Lock()

    def index_of(self, storage: TensorStorage, unit: Any) -> TrajectoryIndex:
        """The index of ``storage``, current; built for it (attaching ``unit``) on first use.

        Args:
            storage (TensorStorage): the storage the unit samples from.
            unit (SampleUnit): the unit, attached to ``storage`` when its index is built.
        """
        with self._lock:
            index = self._index
            if index is None or index.storage is not storage:
                index = TrajectoryIndex(storage, self.traj_key, self.owner)
                self._index = index
                storage.attach(unit)
            if index.is_stale():
                index.rebuild()
            return index

    def lookup(self, storage: TensorStorage, unit: Any) -> Callable[[], TrajectoryIndex] | None:
        """What a builder calls for the index of ``storage``; ``None`` without ``traj_key``.

        Args:
            storage (TensorStorage): the storage the unit samples from.
            unit (SampleUnit): the unit, as :meth:`index_of` takes it.
        """
        if self.traj_key is None:
            return None
        return functools.partial(self.index_of, storage, unit)

    def mark_update(self, index: torch.Tensor | int) -> None:
        """Links newly written slots into the index, if one was built."""
        traj_index = self._index
        if traj_index is not None:
            traj_index.mark_update(index)

    def __getstate__(self) -> dict[str, Any]:
        return {"traj_key": self.traj_key, "owner": self.owner}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)
