"""The segment plan of the recurrent value recompute, compiled (numba, CPU, one pass).

Fills the arrays :func:`torchrl_ext.objectives._segments.plan_segments` turns into a
:class:`~torchrl_ext.objectives._segments.Plan`; the torch operations of
:func:`~torchrl_ext.objectives._segments.plan_segments_torch` compute the same plan and are
the tests' reference. The compiled loop exists because planning in torch operations would be
a visible part of the recompute on the CPU (measured on the GAE benchmark page,
:doc:`/benchmarks/gae`, "Recurrent recompute").
"""

from __future__ import annotations

import numba


def plan(is_init, done, chunk_len, segments, boot_idx, calls, steps):
    """The whole plan in two passes; returns the segment, bootstrap-step and bit counts."""
    first, continues, lengths, booted = segments[0], segments[1], segments[2], segments[3]
    n_seg, n_boot = _find_segments(
        is_init, done, chunk_len, first, continues, lengths, booted, boot_idx
    )
    longest = 0
    for s in range(n_seg):
        longest = max(longest, lengths[s])
    n_bits = 0
    while (1 << n_bits) <= longest:
        n_bits += 1
    index, reads, sources = steps[0], steps[1], steps[2]
    _schedule(
        first[:n_seg],
        lengths[:n_seg],
        booted[:n_seg],
        done.size,
        calls[0, :n_bits],
        calls[1, :n_bits],
        sources,
        index,
        reads,
    )
    return n_seg, n_boot, n_bits


def _find_segments(is_init, done, chunk_len, first, continues, lengths, booted, boot_idx):
    """One pass over the rows: what :class:`Plan` needs of each segment, and the boot steps.

    Writes each segment's first step, reset flag, length and whether it ends on a bootstrap
    step, and the flat indices of the steps followed by one; returns both counts.
    """
    n_rows, steps = done.shape
    seg, n_boot = -1, 0
    for n in range(n_rows):
        for t in range(steps):
            reset = is_init[n, t] or (t > 0 and done[n, t - 1])
            if t == 0 or reset or (chunk_len > 0 and t % chunk_len == 0):
                seg += 1
                first[seg] = n * steps + t
                continues[seg] = not reset
                lengths[seg] = 0
                booted[seg] = 0
            lengths[seg] += 1
            if done[n, t] or t == steps - 1:
                boot_idx[n_boot] = n * steps + t
                n_boot += 1
                lengths[seg] += 1  # the bootstrap step closes the segment
                booted[seg] = 1
    return seg + 1, n_boot


def _schedule(first, lengths, booted, n_steps, lanes, offsets, sources, index, reads):
    """Lanes, offsets (highest bit first) and pool sources of the calls; each step's place.

    A segment's steps are its row steps ``first[s] + k``, then its bootstrap step if
    ``booted[s]``; bootstrap steps are numbered after the ``n_steps`` row steps, in order.
    """
    n_bits = lanes.size
    lanes[:] = 0
    for s in range(first.size):
        for j in range(n_bits):
            lanes[j] += (lengths[s] >> j) & 1
    member_start = lanes.copy()
    offset, start = 0, 0
    for j in range(n_bits - 1, -1, -1):
        offsets[j] = offset
        offset += lanes[j] << j
        member_start[j] = start
        start += lanes[j]
    taken = lanes.copy()
    taken[:] = 0
    boot, n_seg = n_steps, first.size
    for s in range(n_seg):
        rows = lengths[s] - booted[s]
        k, state = 0, s
        for j in range(n_bits - 1, -1, -1):
            if (lengths[s] >> j) & 1:
                lane = taken[j]
                taken[j] += 1
                sources[member_start[j] + lane] = state
                state = n_seg + member_start[j] + lane
                pos = offsets[j] + lane
                for _ in range(1 << j):
                    if k < rows:
                        index[first[s] + k] = pos
                        reads[pos] = first[s] + k
                    else:  # the bootstrap step reads the last row step's next observation
                        index[boot] = pos
                        reads[pos] = n_steps + first[s] + k - 1
                    pos += lanes[j]
                    k += 1
        boot += booted[s]


_find_segments = numba.njit(cache=True, nogil=True, inline="always")(_find_segments)
_schedule = numba.njit(cache=True, nogil=True, inline="always")(_schedule)
plan = numba.njit(cache=True, nogil=True)(plan)
