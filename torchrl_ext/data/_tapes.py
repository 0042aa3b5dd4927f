"""How :class:`~torchrl_ext.data.Tape` lays whole episodes end to end into tapes.

The anchors a sampler drew are the sample's *draws*; each selects the episode holding it. A
:class:`TapeBuilder` turns them into tapes in three steps:

1. :func:`measure`: each draw's episode, read from a :class:`~torchrl_ext.data._episodes.Reach`
   of ``length`` steps each way (done flags in storage order, read only as far as each episode
   goes: :func:`episode_reach`; or trajectory ids), refusing an episode longer than
   a tape;
2. :func:`first_fit`: the episodes, in draw order, each placed whole in the first tape with room
   for it; a draw that fits in no tape is skipped;
3. :func:`lay_out`: the records' storage coordinates and per-record info, each tape closed by a
   masked tail that repeats its last record.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from tensordict.utils import NestedKey

from torchrl_ext.data import _episodes


@dataclasses.dataclass(frozen=True)
class TapeSpec:
    """What a :class:`~torchrl_ext.data.Tape` sample is: the unit's settings of the same names."""

    length: int
    rows: int | None
    is_init_key: NestedKey

    @property
    def tapes(self) -> int:
        """Tapes per sample (``rows``, or one)."""
        return 1 if self.rows is None else self.rows

    @property
    def shape(self) -> torch.Size:
        """The sample's shape: ``[length]``, or ``[rows, length]``."""
        if self.rows is None:
            return torch.Size([self.length])
        return torch.Size([self.rows, self.length])


class Episodes(NamedTuple):
    """Each draw's episode, as columns of the draws' reach."""

    reach: _episodes.Reach
    first: torch.Tensor  # [B] column of the episode's first record
    size: torch.Tensor  # [B] records in the episode


class Placement(NamedTuple):
    """Where the placed episodes lie, in tape order (tape, then position in the tape)."""

    draw: list[int]  # the draw that selected each placed episode
    tape: list[int]
    offset: list[int]  # position of its first record in its tape


class TapeBuilder:
    """Builds the tapes of one unit.

    Args:
        spec (TapeSpec): the unit's tapes.
    """

    def __init__(self, spec: TapeSpec) -> None:
        self.spec = spec

    def build(
        self,
        view: _episodes.Snapshot,
        time: torch.Tensor,
        lanes: tuple[torch.Tensor, ...],
        anchors: torch.Tensor,
        info: dict[str, Any],
        trajectories: Callable[[], _episodes.TrajectoryIndex] | None,
        owner: str,
    ) -> tuple[torch.Tensor | tuple, dict[str, Any]]:
        """Record coordinates and the info, per-draw entries carried to their episode's records.

        Args:
            view (Snapshot): what the sample reads from the storage.
            time (torch.Tensor): the draws' time coordinates ``[B]``, ``B >= 1``.
            lanes (tuple of torch.Tensor): their lane coordinates ``[B]``, one per lane dim.
            anchors (torch.Tensor): the draws as one tensor (``[B]``, or ``[B, ndim]``).
            info (dict): the sampler's info.
            trajectories (callable or None): returns the unit's trajectory index; ``None``
                when episodes are read in storage order.
            owner (str): the unit's class name, for messages.

        Raises:
            ValueError: if a drawn episode is longer than a tape, or a per-draw info entry
                does not have one row per draw.
        """
        _check_info(info, time.shape[0])
        length = self.spec.length
        if trajectories is not None:  # the walks stop where each trajectory ends
            reach = trajectories().reach(time, length, length)
        else:
            reach = episode_reach(view, time, lanes, length)
        episodes = measure(reach, anchors, length, owner)
        placement = first_fit(episodes.size.tolist(), self.spec.tapes, length)
        return lay_out(episodes, placement, lanes, anchors, info, self.spec)


#: Steps each way the first read around a draw covers (then doubled where an episode goes on).
FIRST_REACH = 64


def episode_reach(
    view: _episodes.Snapshot, time: torch.Tensor, lanes: tuple[torch.Tensor, ...], length: int
) -> _episodes.Reach:
    """Each draw's episode in storage order, as a reach of ``length`` steps each way.

    The done flags are read :data:`FIRST_REACH` steps each way first; only the draws whose
    episode reaches that far are read again, twice as far, until ``length``. So a sample reads
    about as many flags as its episodes hold, not ``2 * length`` per draw. The result equals
    one read of ``length`` steps each way: ``to_start`` and ``to_stop`` capped at ``length``.

    Args:
        view (Snapshot): what the sample reads from the storage.
        time (torch.Tensor): the draws' time coordinates ``[B]``.
        lanes (tuple of torch.Tensor): their lane coordinates ``[B]``, one per lane dim.
        length (int): records per tape.
    """
    to_start, to_stop = torch.empty_like(time), torch.empty_like(time)
    pending = torch.arange(time.shape[0], device=time.device)
    steps = min(FIRST_REACH, length)
    while True:
        part = _episodes.reach_in_storage_order(
            view, view.flags, time[pending], tuple(c[pending] for c in lanes), steps, steps, False
        )
        to_start[pending], to_stop[pending] = part.to_start, part.to_stop
        if steps == length:
            break
        # an episode may go on where the read stopped, unless it is already too long
        open_ended = (part.to_start == steps) | (part.to_stop == steps)
        open_ended &= part.to_start + part.to_stop < length
        pending = pending[open_ended]
        if not pending.numel():
            break
        steps = min(2 * steps, length)
    base = torch.remainder(time - length, view.written)
    return _episodes.Reach(length, to_start, to_stop, base=base, written=view.written, wraps=True)


def measure(reach: _episodes.Reach, anchors: torch.Tensor, length: int, owner: str) -> Episodes:
    """Each draw's episode from a reach of ``length`` steps each way.

    An episode longer than ``length`` reaches at least ``length + 1`` records into that reach,
    so it is always seen.

    Args:
        reach (Reach): ``length`` steps before and after each draw.
        anchors (torch.Tensor): the draws (``[B]``, or ``[B, ndim]``), for messages.
        length (int): records per tape.
        owner (str): the unit's class name, for messages.

    Raises:
        ValueError: if a drawn episode is longer than ``length``.
    """
    size = reach.to_start + reach.to_stop + 1
    too_long = size > length
    if bool(too_long.any()):
        draw = int(too_long.nonzero()[0])
        anchor = anchors[draw].tolist()
        raise ValueError(
            f"{owner} never cuts an episode, but anchor {anchor} lies in an episode longer "
            f"than length={length} (at least {int(size[draw])} records). Pass a length of "
            "at least the longest stored episode, or end episodes sooner (e.g. a StepCounter "
            "with max_steps=)."
        )
    return Episodes(reach, reach.back - reach.to_start, size)


def first_fit(sizes: list[int], tapes: int, length: int) -> Placement:
    """Places episodes in draw order, each whole in the first tape with room for it.

    A draw that fits in no tape is skipped; placing stops when every tape is full or the draws
    run out. Every size must be in ``1 .. length``, so the first draw always starts tape 0.

    Args:
        sizes (list of int): each draw's episode size.
        tapes (int): tapes to fill.
        length (int): records per tape.

    Returns:
        The placement, in tape order.
    """
    room = [length] * tapes
    largest = length  # the most room any tape has left
    placed = []
    for draw, size in enumerate(sizes):
        if size > largest:
            continue
        tape = next(t for t in range(tapes) if size <= room[t])
        placed.append((tape, length - room[tape], draw))
        room[tape] -= size
        largest = max(room)
        if largest == 0:
            break
    placed.sort()
    return Placement([p[2] for p in placed], [p[0] for p in placed], [p[1] for p in placed])


def lay_out(
    episodes: Episodes,
    placement: Placement,
    lanes: tuple[torch.Tensor, ...],
    anchors: torch.Tensor,
    info: dict[str, Any],
    spec: TapeSpec,
) -> tuple[torch.Tensor | tuple, dict[str, Any]]:
    """The records of the placed episodes, each tape closed by its masked tail.

    Args:
        episodes (Episodes): each draw's episode.
        placement (Placement): where the placed episodes lie.
        lanes (tuple of torch.Tensor): the draws' lane coordinates, one per lane dim.
        anchors (torch.Tensor): the draws as one tensor (``[B]``, or ``[B, ndim]``).
        info (dict): the sampler's info.
        spec (TapeSpec): the tapes.
    """
    device = anchors.device
    tapes, length = spec.tapes, spec.length
    draw = torch.tensor(placement.draw, dtype=torch.long, device=device)
    tape = torch.tensor(placement.tape, dtype=torch.long, device=device)
    offset = torch.tensor(placement.offset, dtype=torch.long, device=device)
    size = episodes.size[draw]
    episode, step = _placed_records(size)
    flat = (tape * length + offset)[episode] + step  # each placed record's slot in the tapes
    sequence_id = torch.full((tapes * length,), -1, dtype=torch.long, device=device)
    sequence_id[flat] = episode
    in_episode = torch.full_like(sequence_id, -1)
    in_episode[flat] = step
    valid = sequence_id >= 0
    filled = torch.zeros(tapes, dtype=torch.long, device=device).index_add_(0, tape, size)
    source = _sources(filled, length)  # the placed record each slot reads
    source_draw = draw[sequence_id[source]]
    column = episodes.first[source_draw] + in_episode[source]
    position = torch.arange(length, device=device)
    tail_start = (position == filled.unsqueeze(1)).reshape(-1)
    per_record = {
        "sequence_id": sequence_id,
        "step_in_sequence": in_episode,
        "validity_mask": valid,
        "anchor_index": anchors[source_draw],
        spec.is_init_key: (in_episode == 0) | tail_start,
    }
    coords = (
        episodes.reach.positions_of(source_draw, column),
        *(lane[source_draw] for lane in lanes),
    )
    shape = spec.shape
    coords = tuple(c.reshape(shape) for c in coords)
    per_draw = {key: _per_record(value, source_draw, shape) for key, value in info.items()}
    per_record = {key: value.reshape(*shape, *value.shape[1:]) for key, value in per_record.items()}
    return (coords if lanes else coords[0]), {**per_draw, **per_record}


def _placed_records(size: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(episode, step)`` of every placed record: its episode's number and its step in it."""
    ends = torch.cumsum(size, 0)
    total = int(ends[-1]) if ends.numel() else 0
    record = torch.arange(total, device=size.device)
    # a search, not repeat_interleave: the same result at a fraction of its CPU cost
    episode = torch.searchsorted(ends, record, right=True)
    return episode, record - (ends - size)[episode]


def _sources(filled: torch.Tensor, length: int) -> torch.Tensor:
    """The flat slot each slot reads: itself, or on a tail the tape's last placed record.

    A tape holding no episode repeats slot 0, the first record of tape 0 (never empty).
    """
    tapes = filled.shape[0]
    slot = torch.arange(tapes * length, device=filled.device).reshape(tapes, length)
    last = torch.where(filled > 0, slot[:, 0] + filled - 1, 0)
    in_tail = torch.arange(length, device=filled.device) >= filled.unsqueeze(1)
    return torch.where(in_tail, last.unsqueeze(1), slot).reshape(-1)


def _per_record(value: Any, source_draw: torch.Tensor, shape: torch.Size) -> Any:
    """A per-draw info entry carried to each record of the draw's episode; scalars unchanged."""
    if isinstance(value, tuple):
        value = torch.stack([torch.as_tensor(v) for v in value], -1)
    try:
        tensor = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError):
        return value
    if tensor.ndim == 0:
        return value
    gathered = tensor[source_draw.to(tensor.device)]
    return gathered.reshape(*shape, *tensor.shape[1:])


def _check_info(info: dict[str, Any], draws: int) -> None:
    """Refuses per-draw info entries that do not hold one row per draw.

    Raises:
        ValueError: naming the entry.
    """
    for key, value in info.items():
        if isinstance(value, tuple):
            rows = len(torch.as_tensor(value[0])) if value else 0
        else:
            try:
                tensor = torch.as_tensor(value)
            except (TypeError, ValueError, RuntimeError):
                continue
            if tensor.ndim == 0:
                continue
            rows = tensor.shape[0]
        if rows != draws:
            raise ValueError(
                f"info entry {key!r} has {rows} rows but the sampler drew {draws} anchors; "
                "per-anchor info must have one row per anchor."
            )
