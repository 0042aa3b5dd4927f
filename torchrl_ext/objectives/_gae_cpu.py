"""The CPU GAE scan (numba): eight env rows advanced together, backwards in time.

One row's scan is a chain of dependent multiply-adds, so a loop over one row at a time waits
on that chain at every step. Here the rows are cut into tiles of ``ROWS`` consecutive rows by
at most ``STEPS`` steps (a row's tiles are taken last first), and each tile goes through a
small scratch that stays in the L1 cache:

1. prepare (vectorized along time, one row at a time): the TD errors
   ``r + gamma * V' * (not terminated) - V`` and the trace decays
   ``gamma * lmbda * (not done)``;
2. ``_scan_tile``: the backward recursion, the eight rows' chains interleaved so that they
   overlap in the CPU's pipelines (the accumulators are scalars, kept in registers; sixteen
   rows measured no faster);
3. emit (vectorized along time): ``advantage`` and ``value_target = advantage + V`` out.

Preparing also picks each row's last ``done`` flag (the next batch's first ``is_init``), as
it reads ``done`` anyway: a strided gather over cold rows costs more.

Emitting a tile and preparing the next one share one loop (``_emit_and_prepare``, two
scratch buffers), so that the output stores and the next inputs' loads stream together: on
inputs not in the cache this is about 15% faster than two loops.

Non-finite inputs are detected without a pass of their own: each TD error also adds
``V' - V'``, which is 0 for finite ``V'`` and NaN otherwise (so a NaN next value masked by
``terminated`` still shows). A non-finite TD error makes every earlier advantage of its row
non-finite, even across a cut trace (``0 * inf`` and ``0 * nan`` are NaN), so checking each
row's advantage at its first step is enough.

The arithmetic is the four-step Warp kernel's, operation for operation, in the input's dtype
(on Warp's CPU backend the float32 results are identical to the bit).
"""

from __future__ import annotations

import numpy as np
import torch

try:
    import numba

    AVAILABLE = True
except ImportError:  # pragma: no cover - numba is a dependency; this keeps the Warp path alive
    numba = None
    AVAILABLE = False

#: Rows advanced together (``_scan_tile`` spells out one accumulator per row).
ROWS = 8
#: Steps per tile: one ``[ROWS, STEPS]`` scratch is 8 KiB in float32.
STEPS = 256
#: Dtypes the kernel runs; each compiles once (and is cached on disk).
DTYPES = (torch.float32, torch.float64)


def _any_nonfinite(values):
    found = False
    for x in values:
        found |= (x - x) != (x - x)  # x - x is 0 for finite x, NaN otherwise
    return found


def _prepare_step(inputs, coefs, row, t, scratch, lane, s):
    """TD error and trace decay of ``(row, t)``, into ``scratch[:, lane, s]``."""
    reward, value, next_value, terminated, done = inputs
    gamma, gamma_lmbda = coefs
    delta, decay = scratch
    zero = gamma - gamma  # a zero of the input's dtype
    nv = next_value[row, t]
    boot = zero if terminated[row, t] else gamma * nv
    delta[lane, s] = (reward[row, t] - value[row, t]) + boot + (nv - nv)
    decay[lane, s] = zero if done[row, t] else gamma_lmbda


def _emit_step(advantages, lane, s, value, row, t, outputs):
    """Writes the outputs of ``(row, t)``."""
    advantage, value_target = outputs
    a = advantages[lane, s]
    advantage[row, t] = a
    value_target[row, t] = a + value[row, t]


def _scan_tile(delta, decay, steps, carry):
    """The backward recursion over one tile, in place; returns the rows' running advantages."""
    a0, a1, a2, a3, a4, a5, a6, a7 = carry
    for i in range(steps):
        s = steps - 1 - i
        a0 = delta[0, s] + decay[0, s] * a0
        a1 = delta[1, s] + decay[1, s] * a1
        a2 = delta[2, s] + decay[2, s] * a2
        a3 = delta[3, s] + decay[3, s] * a3
        a4 = delta[4, s] + decay[4, s] * a4
        a5 = delta[5, s] + decay[5, s] * a5
        a6 = delta[6, s] + decay[6, s] * a6
        a7 = delta[7, s] + decay[7, s] * a7
        delta[0, s] = a0
        delta[1, s] = a1
        delta[2, s] = a2
        delta[3, s] = a3
        delta[4, s] = a4
        delta[5, s] = a5
        delta[6, s] = a6
        delta[7, s] = a7
    return a0, a1, a2, a3, a4, a5, a6, a7


def _zeros(zero):
    """A fresh carry: ``ROWS`` zeros."""
    return (zero, zero, zero, zero, zero, zero, zero, zero)


def _tile(k, n_rows, n_steps):
    """First row, first step and step count of tile ``k`` (no steps past the last tile).

    Tiles run block by block; within a block of rows, from the last steps to the first.
    """
    chunks = (n_steps + STEPS - 1) // STEPS
    if k >= chunks * ((n_rows + ROWS - 1) // ROWS):
        return 0, 0, 0
    end = n_steps - (k % chunks) * STEPS
    start = max(0, end - STEPS)
    return (k // chunks) * ROWS, start, end - start


def _unsigned(tile):
    """A tile's ``(first row, first step, steps)`` as unsigned integers."""
    first, start, steps = tile
    return np.uint64(first), np.uint64(start), np.uint64(steps)


def _emit_and_prepare(inputs, coefs, outputs, last_done, done_tile, advantages, next_tile,
                      scratch):  # fmt: skip
    """Emits tile ``done_tile`` from ``advantages`` and prepares ``next_tile`` into ``scratch``.

    Either tile may have no steps.
    """
    n_rows, n_steps = inputs[0].shape
    value, done = inputs[1], inputs[4]
    # unsigned indices: numba then skips its negative-index wrap-around, which would turn
    # the vectorized loops' loads and stores into gathers and scatters
    first_e, start_e, steps_e = _unsigned(done_tile)
    first_p, start_p, steps_p = _unsigned(next_tile)
    both = min(steps_e, steps_p)
    last_row = np.uint64(n_rows - 1)
    for lane in range(ROWS):
        row_e = min(first_e + np.uint64(lane), last_row)  # a partial block repeats its last row
        row_p = min(first_p + np.uint64(lane), last_row)
        for s in range(both):
            _emit_step(advantages, lane, s, value, row_e, start_e + s, outputs)
            _prepare_step(inputs, coefs, row_p, start_p + s, scratch, lane, s)
        for s in range(both, steps_e):
            _emit_step(advantages, lane, s, value, row_e, start_e + s, outputs)
        for s in range(both, steps_p):
            _prepare_step(inputs, coefs, row_p, start_p + s, scratch, lane, s)
        if steps_p > 0 and start_p + steps_p == n_steps:
            last_done[row_p] = done[row_p, np.uint64(n_steps - 1)]


def _scan_rows(inputs, coefs, outputs, last_done):
    """GAE over ``[N, T]`` rows; returns whether any input (or result) was not finite.

    Args:
        inputs: ``(reward, value, next_value, terminated, done)``, ``[N, T]`` each.
        coefs: ``(gamma, gamma * lmbda)`` as scalars of the inputs' dtype.
        outputs: ``(advantage, value_target)``, ``[N, T]`` each, written.
        last_done: bool ``[N]``, written: each row's last ``done`` flag.
    """
    n_rows, n_steps = inputs[0].shape
    delta = np.empty((2, ROWS, STEPS), dtype=inputs[0].dtype)
    decay = np.empty((2, ROWS, STEPS), dtype=inputs[0].dtype)
    zero = coefs[0] - coefs[0]
    carry = _zeros(zero)
    no_tile = (0, 0, 0)
    first = _tile(0, n_rows, n_steps)
    scratch = (delta[0], decay[0])
    _emit_and_prepare(inputs, coefs, outputs, last_done, no_tile, delta[1], first, scratch)
    nonfinite = False
    k = 0
    while True:
        tile = _tile(k, n_rows, n_steps)
        if tile[2] == 0:
            return nonfinite
        if tile[1] + tile[2] == n_steps:  # a block's last steps come first: start afresh
            carry = _zeros(zero)
        cur, nxt = k % 2, (k + 1) % 2
        carry = _scan_tile(delta[cur], decay[cur], tile[2], carry)
        if tile[1] == 0:  # the rows' first steps: any non-finite input shows here
            nonfinite |= _any_nonfinite(carry)
        upcoming = _tile(k + 1, n_rows, n_steps)
        scratch = (delta[nxt], decay[nxt])
        _emit_and_prepare(inputs, coefs, outputs, last_done, tile, delta[cur], upcoming, scratch)
        k += 1


if AVAILABLE:
    _jit_inline = numba.njit(cache=True, nogil=True, inline="always")
    _any_nonfinite = _jit_inline(_any_nonfinite)
    _prepare_step = _jit_inline(_prepare_step)
    _emit_step = _jit_inline(_emit_step)
    _scan_tile = _jit_inline(_scan_tile)
    _zeros = _jit_inline(_zeros)
    _tile = _jit_inline(_tile)
    _unsigned = _jit_inline(_unsigned)
    _emit_and_prepare = _jit_inline(_emit_and_prepare)
    _scan_rows = numba.njit(cache=True, nogil=True)(_scan_rows)


def applies(
    reward: torch.Tensor,
    value: torch.Tensor,
    next_value: torch.Tensor,
    terminated: torch.Tensor,
    done: torch.Tensor,
) -> bool:
    """Whether the kernel takes these ``[N, T, K]`` inputs: CPU, one channel, contiguous.

    Reward and values must share a dtype in :data:`DTYPES`; flags must be bool (as checked by
    the caller). Other layouts go to the strided Warp kernel.
    """
    if not AVAILABLE or reward.device.type != "cpu" or reward.shape[2] != 1:
        return False
    if reward.dtype not in DTYPES or not reward.dtype == value.dtype == next_value.dtype:
        return False
    inputs = (reward, value, next_value, terminated, done)
    return all(x.is_contiguous() for x in inputs)


def gae_scan_cpu(
    reward: torch.Tensor,
    value: torch.Tensor,
    next_value: torch.Tensor,
    terminated: torch.Tensor,
    done: torch.Tensor,
    gamma: float,
    lmbda: float,
) -> tuple[torch.Tensor, torch.Tensor, bool, torch.Tensor]:
    """Runs the scan on ``[N, T, 1]`` inputs :func:`applies` accepted.

    Returns:
        ``(advantage, value_target, nonfinite, last_done)``: two new ``[N, T, 1]`` tensors,
        whether any input was NaN or infinite (or a result overflowed), and the ``done`` flag
        of each row's last step ``[N]``.
    """
    advantage = torch.empty_like(reward)
    value_target = torch.empty_like(reward)
    last_done = torch.empty(reward.shape[0], dtype=torch.bool)
    scalar = np.float32 if reward.dtype == torch.float32 else np.float64
    nonfinite = _scan_rows(
        tuple(x.numpy()[..., 0] for x in (reward, value, next_value, terminated, done)),
        (scalar(gamma), scalar(gamma * lmbda)),
        (advantage.numpy()[..., 0], value_target.numpy()[..., 0]),
        last_done.numpy(),
    )
    return advantage, value_target, bool(nonfinite), last_done
