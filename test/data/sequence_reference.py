"""A slow, obvious window expander written with plain Python loops, used as the test oracle.

It follows the documented window definitions literally, one anchor and one record at a time, and
shares no code with the package.
"""

from __future__ import annotations

from ring_reference import Ring


def reach(ring: Ring, anchor: int, crosses: bool) -> tuple[int, int]:
    """(steps back to the episode start, steps forward to the episode end) from ``anchor``."""
    w = ring.written
    forward = 0
    slot = anchor
    while slot != ring.newest and (crosses or not ring.done[slot]) and forward < 4 * w:
        slot = (slot + 1) % w
        forward += 1
    back = 0
    slot = anchor
    while slot != ring.oldest:
        previous = (slot - 1) % w
        if not crosses and ring.done[previous]:
            break
        slot = previous
        back += 1
    return back, forward


def expand(ring, anchor, length, episode_boundary, burn_in=0, bootstrap=0, stride=1):
    """Returns (slots, valid, is_init) of one anchor's window, record by record."""
    crosses = episode_boundary == "include_reset"
    to_start, to_stop = reach(ring, anchor, crosses)
    last = (length + bootstrap - 1) * stride
    shift = 0
    if episode_boundary == "stop":
        shift = min(max(0, last - to_stop), to_start)
    slots, valid, rels = [], [], []
    for k in range(burn_in + length + bootstrap):
        rel = (k - burn_in) * stride - shift
        ok = -to_start <= rel <= to_stop
        rel = min(max(rel, -to_start), to_stop)
        slots.append((anchor + rel) % ring.written)
        valid.append(ok)
        rels.append(rel)
    is_init = []
    for k in range(len(slots)):
        if k == 0:
            is_init.append(True)
            continue
        starts = valid[k] and not valid[k - 1]
        if crosses:
            for r in range(rels[k - 1], rels[k]):
                if ring.done[(anchor + r) % ring.written]:
                    starts = True
        is_init.append(starts)
    return slots, valid, is_init


def expand_chain(chain, position, length, episode_boundary, burn_in=0, bootstrap=0, stride=1):
    """Same as :func:`expand` along an explicit list of slots (one trajectory, write order)."""
    to_start, to_stop = position, len(chain) - 1 - position
    last = (length + bootstrap - 1) * stride
    shift = min(max(0, last - to_stop), to_start) if episode_boundary == "stop" else 0
    slots, valid = [], []
    for k in range(burn_in + length + bootstrap):
        rel = (k - burn_in) * stride - shift
        valid.append(-to_start <= rel <= to_stop)
        rel = min(max(rel, -to_start), to_stop)
        slots.append(chain[position + rel])
    return slots, valid
