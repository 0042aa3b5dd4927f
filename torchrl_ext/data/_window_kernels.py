"""Compiled (numba) expansion of windows in storage order, for CPU storages.

One loop per anchor reads the done flags inside the anchor's reach and writes its window:
storage positions, validity and reset flags. It computes exactly what the vectorized torch path
in :mod:`torchrl_ext.data._episodes` computes (the tests run both against a plain-Python
reference), without the per-operation overhead of a few dozen small tensor operations.
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


def _expand(flags, time, lanes, written, oldest, newest, back, forward, offsets, mode, out):
    positions, valid, starts = out
    for b in range(time.shape[0]):
        _expand_one(flags, time[b], lanes[b], written, oldest, newest, back, forward, offsets,
                    mode, positions[b], valid[b], starts[b])  # fmt: skip


def _wrap(position, written):
    """``position % written`` for ``-written <= position < 2 * written``, without a division."""
    if position >= written:
        return position - written
    if position < 0:
        return position + written
    return position


def _expand_one(flags, t, lane, written, oldest, newest, back, forward, offsets, mode,
                positions, valid, starts):  # fmt: skip
    # reaches span at most back + forward < written records, so positions wrap at most once
    to_stop = min(_wrap(newest - t, written), forward)
    to_start = min(_wrap(t - oldest, written), back)
    has_flags = flags.shape[0] > 0
    if mode != CROSS and has_flags:
        for j in range(to_stop):
            if flags[_wrap(t + j, written), lane]:
                to_stop = j
                break
        for j in range(1, to_start + 1):
            if flags[_wrap(t - j, written), lane]:
                to_start = j - 1
                break
    shift = min(max(0, forward - to_stop), to_start) if mode == STOP else 0
    previous = 0
    for k in range(offsets.shape[0]):
        rel = offsets[k] - shift
        clamped = min(max(rel, -to_start), to_stop)
        positions[k] = _wrap(t + clamped, written)
        valid[k] = clamped == rel
        start = k == 0 or (valid[k] and not valid[k - 1])
        if mode == CROSS and k > 0 and has_flags:
            for r in range(previous, clamped):
                if flags[_wrap(t + r, written), lane]:
                    start = True
        starts[k] = start
        previous = clamped


if AVAILABLE:
    _wrap = numba.njit(cache=True, nogil=True, inline="always")(_wrap)
    _expand_one = numba.njit(cache=True, nogil=True)(_expand_one)
    _expand = numba.njit(cache=True, nogil=True)(_expand)

_NO_FLAGS = np.zeros((0, 1), dtype=np.bool_)


def expand_in_storage_order(
    flags: torch.Tensor | None,
    time: torch.Tensor,
    lanes: torch.Tensor | None,
    seam: tuple[int, int, int],
    back: int,
    forward: int,
    offsets: torch.Tensor,
    mode: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Returns ``(positions, valid, is_init)``, each ``[B, window]``, for CPU tensors.

    Args:
        flags (torch.Tensor or None): done flags ``[capacity, lanes]`` (bool), or ``None``.
        time (torch.Tensor): ``[B]`` anchor time coordinates (int64).
        lanes (torch.Tensor or None): ``[B]`` anchor lanes (int64), ``None`` for one lane.
        seam (tuple of int): ``(written, oldest, newest)``.
        back (int): the farthest step before the anchor a window may reach.
        forward (int): the farthest step after the anchor a window may reach.
        offsets (torch.Tensor): ``[window]`` offsets of the records from the anchor (int64).
        mode (int): ``PAD``, ``STOP`` or ``CROSS``.
    """
    num, window = time.shape[0], offsets.shape[0]
    positions = torch.empty(num, window, dtype=torch.int64)
    valid = torch.empty(num, window, dtype=torch.bool)
    starts = torch.empty(num, window, dtype=torch.bool)
    flag_array = _NO_FLAGS if flags is None else flags.numpy()
    lane_array = np.zeros(num, dtype=np.int64) if lanes is None else lanes.numpy()
    written, oldest, newest = seam
    _expand(
        flag_array,
        time.numpy(),
        lane_array,
        written,
        oldest,
        newest,
        back,
        forward,
        offsets.numpy(),
        mode,
        (positions.numpy(), valid.numpy(), starts.numpy()),
    )
    return positions, valid, starts
