"""A slow, obvious tape builder written with plain Python loops, used as the test oracle.

It follows ``Tape``'s documented rules literally, one draw and one record at a time, and shares
no code with the package: find the episode holding each anchor by walking the done flags (or
the records of its trajectory id in write order), refuse an episode longer than a tape, place
episodes in draw order in the first tape with room for them, and close every tape with a masked
tail repeating its last record.
"""

from __future__ import annotations

from dataclasses import dataclass

from ring_reference import Ring


@dataclass
class Record:
    """One record of a tape, as the unit reports it."""

    slot: object  # storage index (an int, or a (time, lane) pair)
    valid: bool
    is_init: bool
    sequence_id: int
    step: int
    anchor: object


def episode_in_ring(ring: Ring, anchor: int) -> list[int]:
    """The slots of the episode holding ``anchor``, first to last.

    An episode starts after a done flag or at the oldest record, and ends at a done flag or at
    the newest record.
    """
    slots = [anchor]
    slot = anchor
    while slot != ring.oldest and not ring.done[(slot - 1) % ring.written]:
        slot = (slot - 1) % ring.written
        slots.insert(0, slot)
    slot = anchor
    while slot != ring.newest and not ring.done[slot]:
        slot = (slot + 1) % ring.written
        slots.append(slot)
    return slots


def episode_by_id(ids: dict[int, int], serial: dict[int, int], anchor: int) -> list[int]:
    """The slots holding the trajectory id of ``anchor``, in write order.

    Args:
        ids: the stored trajectory id of every written slot.
        serial: the write number of every written slot (larger: written later).
        anchor: the anchor's slot.
    """
    return sorted((s for s in ids if ids[s] == ids[anchor]), key=serial.get)


class TooLong(ValueError):
    """An anchor's episode is longer than a tape."""


def build(episodes: list[list], anchors: list, length: int, rows: int) -> list[list[Record]]:
    """Lays the episodes of the draws into ``rows`` tapes of ``length`` records.

    Args:
        episodes: the slots of each draw's episode, first to last.
        anchors: each draw's anchor.
        length: records per tape.
        rows: tapes.
    """
    for episode in episodes:
        if len(episode) > length:
            raise TooLong(len(episode))
    tapes = [[] for _ in range(rows)]
    used = [0] * rows
    for episode, anchor in zip(episodes, anchors, strict=True):
        for row in range(rows):
            if used[row] + len(episode) <= length:
                tapes[row].append((episode, anchor))
                used[row] += len(episode)
                break
    out = []
    number = 0
    for row in range(rows):
        records = []
        for episode, anchor in tapes[row]:
            for step, slot in enumerate(episode):
                records.append(Record(slot, True, step == 0, number, step, anchor))
            number += 1
        if records:
            repeated = records[-1]
        else:
            repeated = out[0][0]  # tape 0 always holds the first draw
        for k in range(length - len(records)):
            records.append(Record(repeated.slot, False, k == 0, -1, -1, repeated.anchor))
        out.append(records)
    return out
