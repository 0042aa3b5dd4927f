"""Window expansion in storage order for CPU storages with done flags: the compiled path.

One loop per anchor reads the done flags inside the anchor's reach and writes its window:
storage positions, validity and reset flags, and the per-record info that depends only on the
window geometry (sequence id, step, learning mask, anchor). It returns exactly what the batched
torch path of :class:`~torchrl_ext.data.Sequence` (``use_compiled = False``, which serves every
other storage, device and ``traj_key``) returns; the tests run both against a plain-Python
reference.

Why it exists: the batched torch path spends its time in the fixed cost of a few dozen small
tensor operations, which one loop does not pay (measured on the sequence-replay benchmark page,
:doc:`/benchmarks/replay`, "Compiled paths and their references").
"""

from __future__ import annotations

import numpy as np
import torch

try:
    import numba

    AVAILABLE = True
except ImportError:  # pragma: no cover - numba is a dependency; this keeps the torch path alive
    numba = None
    AVAILABLE = False

PAD, STOP, CROSS = 0, 1, 2

#: Rows of the int64 block :func:`expand_records` fills (``LANE`` only with a lane dimension).
POSITION, SEQUENCE_ID, STEP, ANCHOR, LANE = range(5)
#: Rows of its bool block.
VALID, LEARNING, START = range(3)


def _prefetch_reaches(flags, time, lanes, back, forward):
    """Prefetches the done flags of every anchor's reach before any is read.

    Anchors are scattered over the storage, so on a storage larger than the caches each
    reach's first flags miss; asking for all of them up front lets those misses overlap
    instead of each waiting for the previous anchor's. A prefetch is only a hint: the part of
    a reach that wraps around the ring is skipped.
    """
    if flags.shape[0] == 0:
        return
    base, row = flags.ctypes.data, flags.strides[0]
    step = max(row, 64)  # a cache line, or one row per line when rows are wider
    last_row = flags.shape[0] - 1
    has_lanes = lanes.shape[0] > 0
    for b in range(time.shape[0]):
        column = base + (lanes[b] if has_lanes else 0) * flags.strides[1]
        first, last = max(time[b] - back, 0), min(time[b] + forward, last_row)
        for address in range(column + first * row, column + last * row + 1, step):
            prefetch(address)


def _expand(flags, time, lanes, seam, geometry, ints, bools):
    written, oldest, newest = seam
    burn_in, length, stride, back, forward, mode = geometry
    has_lanes = lanes.shape[0] > 0
    _prefetch_reaches(flags, time, lanes, back, forward)
    for b in range(time.shape[0]):
        t = time[b]
        lane = lanes[b] if has_lanes else 0
        _expand_one(flags, t, lane, written, oldest, newest, back, forward, burn_in, stride,
                    mode, ints[POSITION, b], bools[VALID, b], bools[START, b])  # fmt: skip
        ints[SEQUENCE_ID, b, :] = b
        ints[ANCHOR, b, :] = t
        if has_lanes:
            ints[LANE, b, :] = lane
        _steps(burn_in, length, ints[STEP, b], bools[LEARNING, b])


def _steps(burn_in, length, steps, learning):
    """Step in the window and learning mask of one window."""
    for k in range(steps.shape[0]):
        steps[k] = k
        learning[k] = burn_in <= k < burn_in + length


def _wrap(position, written):
    """``position % written`` for ``-written <= position < 2 * written``, without a division."""
    if position >= written:
        return position - written
    if position < 0:
        return position + written
    return position


def _expand_one(flags, t, lane, written, oldest, newest, back, forward, burn_in, stride, mode,
                positions, valid, starts):  # fmt: skip
    # reaches span at most back + forward < written records, so positions wrap at most once
    to_stop = min(_wrap(newest - t, written), forward)
    to_start = min(_wrap(t - oldest, written), back)
    has_flags = flags.shape[0] > 0
    if mode != CROSS and has_flags:
        to_stop = _unflagged_run(flags, t, 1, to_stop, lane, written)
        to_start = _unflagged_run(flags, t - 1, -1, to_start, lane, written)
    shift = min(max(0, forward - to_stop), to_start) if mode == STOP else 0
    if mode == CROSS and has_flags:
        _crossing_window(flags, t, lane, written, to_start, to_stop, burn_in, stride,
                         positions, valid, starts)  # fmt: skip
    else:
        _clamped_window(t, written, to_start, to_stop, shift, burn_in, stride,
                        positions, valid, starts)  # fmt: skip


def _unflagged_run(flags, first, direction, count, lane, written):
    """How many of the records ``first + direction * i`` (``i < count``) precede a done flag."""
    last = first + direction * (count - 1)
    if 0 <= min(first, last) and max(first, last) < written:
        for i in range(count):  # no wrap: the common case, a plain scan
            if flags[first + direction * i, lane]:
                return i
        return count
    for i in range(count):
        if flags[_wrap(first + direction * i, written), lane]:
            return i
    return count


def _clamped_window(t, written, to_start, to_stop, shift, burn_in, stride,
                    positions, valid, starts):  # fmt: skip
    """A window clamped to ``[-to_start, to_stop]``; its valid records form one run."""
    for k in range(positions.shape[0]):
        rel = (k - burn_in) * stride - shift
        clamped = min(max(rel, -to_start), to_stop)
        positions[k] = _wrap(t + clamped, written)
        valid[k] = clamped == rel
        starts[k] = False
    if positions.shape[0] > 0:
        starts[0] = True
    for k in range(positions.shape[0]):
        if valid[k]:
            starts[k] = True
            break


def _crossing_window(flags, t, lane, written, to_start, to_stop, burn_in, stride,
                     positions, valid, starts):  # fmt: skip
    """``"include_reset"`` with done flags: episodes starting inside the window also start."""
    previous = 0
    for k in range(positions.shape[0]):
        rel = (k - burn_in) * stride
        clamped = min(max(rel, -to_start), to_stop)
        positions[k] = _wrap(t + clamped, written)
        valid[k] = clamped == rel
        start = k == 0 or (valid[k] and not valid[k - 1])
        if k > 0:
            for r in range(previous, clamped):
                if flags[_wrap(t + r, written), lane]:
                    start = True
        starts[k] = start
        previous = clamped


if AVAILABLE:
    from torchrl_ext._native.intrinsics import prefetch

    _prefetch_reaches = numba.njit(cache=True, nogil=True)(_prefetch_reaches)
    _wrap = numba.njit(cache=True, nogil=True, inline="always")(_wrap)
    _steps = numba.njit(cache=True, nogil=True, inline="always")(_steps)
    _unflagged_run = numba.njit(cache=True, nogil=True, inline="always")(_unflagged_run)
    _clamped_window = numba.njit(cache=True, nogil=True, inline="always")(_clamped_window)
    _crossing_window = numba.njit(cache=True, nogil=True)(_crossing_window)
    _expand_one = numba.njit(cache=True, nogil=True)(_expand_one)
    _expand = numba.njit(cache=True, nogil=True)(_expand)

_NO_FLAGS = np.zeros((0, 1), dtype=np.bool_)
_NO_LANES = np.zeros(0, dtype=np.int64)


def expand_records(
    flags: torch.Tensor | None,
    time: torch.Tensor,
    lanes: torch.Tensor | None,
    seam: tuple[int, int, int],
    geometry: tuple[int, int, int, int, int, int],
    window: int,
    ints: torch.Tensor,
    bools: torch.Tensor,
) -> None:
    """Fills ``ints`` and ``bools`` with the windows of ``B`` anchors, for CPU tensors.

    ``ints`` rows (``[B, window]`` each, or ``[B * window]``): ``POSITION`` (storage time
    coordinates), ``SEQUENCE_ID``, ``STEP`` (step in the window), ``ANCHOR`` (the anchor's time
    coordinate) and, with ``lanes``, ``LANE`` (the anchor's lane). ``bools`` rows: ``VALID``,
    ``LEARNING`` (the learning mask) and ``START`` (``is_init``).

    Args:
        flags (torch.Tensor or None): done flags ``[capacity, lanes]`` (bool), or ``None``.
        time (torch.Tensor): ``[B]`` anchor time coordinates (int64, contiguous).
        lanes (torch.Tensor or None): ``[B]`` anchor lanes (int64, contiguous), ``None`` for
            one lane.
        seam (tuple of int): ``(written, oldest, newest)``.
        geometry (tuple of int): ``(burn_in, length, stride, back, forward, mode)``: the
            window's layout, the farthest steps before and after the anchor a window may reach,
            and ``PAD``, ``STOP`` or ``CROSS``.
        window (int): records per anchor.
        ints (torch.Tensor): contiguous int64 ``[4 or 5, B, window]`` (or ``[rows, B * window]``)
            output.
        bools (torch.Tensor): contiguous bool ``[3, B, window]`` (or ``[3, B * window]``) output.
    """
    num = time.shape[0]
    _expand(
        _NO_FLAGS if flags is None else flags.numpy(),
        time.numpy(),
        _NO_LANES if lanes is None else lanes.numpy(),
        seam,
        geometry,
        ints.numpy().reshape(ints.shape[0], num, window),
        bools.numpy().reshape(bools.shape[0], num, window),
    )
