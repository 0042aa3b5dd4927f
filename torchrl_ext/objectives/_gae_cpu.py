"""The CPU GAE scan (numba): eight env rows advanced together, backwards in time.

One row's scan is a chain of dependent multiply-adds, so a loop over one row at a time waits
on that chain at every step. Here the rows are cut into tiles of ``ROWS`` consecutive rows by
at most ``STEPS`` steps (a row's tiles are taken last first), and each tile goes through a
small row-major scratch that stays in the L1 cache. Two kernels share that plan.

**float32** (``_scan_rows_vector``), per tile:

1. prepare (plain numba, vectorized along time, one row at a time): the TD errors
   ``r + gamma * V' * (not terminated) - V`` and the trace decays ``gamma * lmbda * (not
   done)`` into a ``[ROWS, width]`` scratch, ``width`` the tile's steps rounded up to a
   multiple of 8; the columns in front get an identity step (TD error ``-0.0``, decay ``1.0``:
   ``-0.0 + 1.0 * a`` is ``a``), so any ``T`` scans as whole chunks of 8 steps;
2. scan (:func:`~torchrl_ext.objectives._gae_simd.scan_chunks`, LLVM IR): per chunk, the 8x8
   blocks of TD errors and decays are loaded as eight ``<8 x float>`` vectors and transposed
   in registers, the 8 steps run as vector ``fmul`` + ``fadd`` (one lane per row), and the
   results are transposed back into the scratch. The scan is cut into ``PARTS`` parts; after
   each, one row of the *next* tile's inputs is prefetched into L2, so the loads of the next
   prepare overlap the scan (on inputs not in the cache, a full call measured 10-20% faster;
   prefetching into L1, or two tiles ahead, was not faster);
3. emit: ``advantage`` and ``value_target = advantage + V``, stored non-temporally
   (:func:`~torchrl_ext.objectives._gae_simd.emit8`, whole cache lines; each row segment's
   unaligned ends, or outputs whose offsets to a cache line differ, get plain stores), with
   one store fence at the end. The outputs are not read again soon: bypassing the cache saves
   reading their lines first and leaves the cache to the inputs (the kernel alone measured
   about 10% faster than with plain stores).

A tile is emitted, then the next one prepared into the same scratch (interleaving the two
row by row measured no faster).

When ``first_is_init`` is given, ``is_init`` (``done`` one step later) is written per tile
from the ``done`` rows just read, instead of in a separate pass over the flags (on inputs not
in the cache, 0.1-0.25 ms less at 4096 x 256; no gain on warm inputs), and streamed out like
the other outputs (see :func:`_shift_done`).

**float64** (``_scan_rows_scalar``) keeps the scalar kernel: ``_scan_tile`` interleaves the
eight rows' chains with scalar accumulators in registers, and emitting a tile and preparing
the next one share one loop (``_emit_and_prepare``, two scratch buffers); ``is_init`` is
written per tile as in the float32 kernel.

Both pick each row's last ``done`` flag (the next batch's first ``is_init``) while preparing,
as they read ``done`` anyway: a strided gather over cold rows costs more.

Non-finite inputs are detected without a pass of their own: each TD error also adds
``V' - V'``, which is 0 for finite ``V'`` and NaN otherwise (so a NaN next value masked by
``terminated`` still shows). A non-finite TD error makes every earlier advantage of its row
non-finite, even across a cut trace (``0 * inf`` and ``0 * nan`` are NaN), so checking each
row's advantage at its first step is enough.

The arithmetic is the four-step Warp kernel's, operation for operation, in the input's dtype,
with no fused multiply-add (on Warp's CPU backend the float32 results are identical to the
bit, and so are the two kernels').
"""

from __future__ import annotations

import numpy as np
import torch

try:
    import numba

    from torchrl_ext._native.intrinsics import memcpy, prefetch, voidptr
    from torchrl_ext.objectives import _gae_simd

    AVAILABLE = _gae_simd.AVAILABLE
except ImportError:  # pragma: no cover - numba is a dependency; this keeps the Warp path alive
    numba = None
    AVAILABLE = False

#: Lanes of the vector scan (float32): rows advanced together and steps per chunk.
LANES = 8
#: Rows advanced together (one vector lane each; ``_scan_tile`` spells out eight scalars).
ROWS = LANES
#: Steps per tile: one ``[ROWS, STEPS]`` scratch is 8 KiB in float32.
STEPS = 256
#: Parts a tile's scan is cut into, to prefetch the next tile's rows between them.
PARTS = 8
#: Bytes of a cache line (non-temporal stores are issued for whole lines).
LINE = 64
#: Dtypes the kernel runs; each compiles once (and is cached on disk).
DTYPES = (torch.float32, torch.float64)


def _any_nonfinite(values):
    found = False
    for x in values:
        found |= (x - x) != (x - x)  # x - x is 0 for finite x, NaN otherwise
    return found


def _td_step(inputs, coefs, row, t):
    """``(TD error, trace decay)`` of ``(row, t)``, in the inputs' dtype."""
    reward, value, next_value, terminated, done = inputs
    gamma, gamma_lmbda = coefs
    zero = gamma - gamma  # a zero of the input's dtype
    nv = next_value[row, t]
    boot = zero if terminated[row, t] else gamma * nv
    delta = (reward[row, t] - value[row, t]) + boot + (nv - nv)
    return delta, zero if done[row, t] else gamma_lmbda


def _prepare_step(inputs, coefs, row, t, scratch, lane, s):
    """TD error and trace decay of ``(row, t)``, into ``scratch[:, lane, s]``."""
    delta, decay = scratch
    delta[lane, s], decay[lane, s] = _td_step(inputs, coefs, row, t)


def _write_step(outputs, value, row, t, a):
    """Writes advantage ``a`` of ``(row, t)`` and its value target."""
    advantage, value_target = outputs
    advantage[row, t] = a
    value_target[row, t] = a + value[row, t]


def _emit_step(advantages, lane, s, value, row, t, outputs):
    """Writes the outputs of ``(row, t)`` from ``advantages[lane, s]``."""
    _write_step(outputs, value, row, t, advantages[lane, s])


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


def _scan_rows_scalar(inputs, coefs, outputs, last_done, first_is_init, is_init):
    """The float64 kernel: :func:`_scan_rows` with the scan in scalar registers.

    ``is_init`` (bool ``[N, T]``) is written from ``first_is_init`` (``[N]``) when it has
    rows.
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
    derive = is_init.shape[0] > 0
    row = np.empty(STEPS, dtype=np.bool_)
    k = 0
    while True:
        tile = _tile(k, n_rows, n_steps)
        if tile[2] == 0:
            if derive:
                _gae_simd.store_fence()
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
        if derive:
            _shift_done(inputs[4], first_is_init, tile, is_init, row)
        k += 1


def _width(steps):
    """Scratch row length of a tile of ``steps`` steps: rounded up to whole vector chunks."""
    return (steps + np.uint64(LANES - 1)) // np.uint64(LANES) * np.uint64(LANES)


def _prepare_tile(inputs, coefs, tile, scratch, last_done):
    """TD errors and trace decays of ``tile`` into the row-major ``[ROWS, width]`` scratch.

    Each row's steps end its scratch row; the columns before them (to round the row up to
    whole chunks) get an identity step, TD error ``-0.0`` and decay ``1.0``: ``-0.0 + 1.0 * a``
    is ``a`` for every ``a``, so they leave the scan's results and carry as they are.
    """
    n_rows, n_steps = inputs[0].shape
    done = inputs[4]
    delta, decay = scratch
    first, start, steps = _unsigned(tile)
    width = _width(steps)
    pad = width - steps
    last_row = np.uint64(n_rows - 1)
    for lane in range(ROWS):
        row = min(first + np.uint64(lane), last_row)  # a partial block repeats its last row
        base = np.uint64(lane) * width
        for j in range(pad):
            delta[base + j] = -0.0
            decay[base + j] = 1.0
        base += pad
        for s in range(steps):
            delta[base + s], decay[base + s] = _td_step(inputs, coefs, row, start + s)
        if start + steps == n_steps:
            last_done[row] = done[row, np.uint64(n_steps - 1)]


def _shift_done(done, first_is_init, tile, is_init, row):
    """``is_init`` of ``tile``'s rows: ``done`` one step later, ``first_is_init`` first.

    Each shifted row is assembled in ``row`` (a small buffer, in L1) with ``memcpy`` (a byte
    loop does not vectorize: the bool arrays may alias), then streamed out: its whole cache
    lines with non-temporal stores, its unaligned ends with plain ones. Plain stores of the
    1 MB of ``is_init`` at 4096 x 256 cost 0.1-0.2 ms more, reading each line first.
    """
    n_rows, n_steps = done.shape
    first, start, steps = _unsigned(tile)
    last_row = np.uint64(n_rows - 1)
    line = np.uint64(LINE)
    buffer = row.ctypes.data
    for lane in range(ROWS):
        r = min(first + np.uint64(lane), last_row)
        offset = r * np.uint64(n_steps) + start
        if start == 0:
            row[0] = first_is_init[r]
            memcpy(buffer + 1, done.ctypes.data + offset, steps - 1)
        else:
            memcpy(buffer, done.ctypes.data + offset - 1, steps)
        out = is_init.ctypes.data + offset
        head = min(steps, (line - out % line) % line)
        memcpy(out, buffer, head)
        s = head
        while s + line <= steps:
            _gae_simd.stream32(out + s, buffer + s)
            _gae_simd.stream32(out + s + np.uint64(32), buffer + s + np.uint64(32))
            s += line
        memcpy(out + s, buffer + s, steps - s)


def _streamable(outputs):
    """Whether the outputs can be stored non-temporally: same offset to a cache line."""
    advantage, value_target = outputs
    gap = advantage.ctypes.data - value_target.ctypes.data
    return gap % np.uint64(LINE) == 0


def _emit_plain(delta, src, value, outputs, row, start, begin, end):
    """Plain stores of steps ``begin:end`` of a tile row (``delta[src:]`` is its scratch row)."""
    for s in range(begin, end):
        _write_step(outputs, value, row, start + s, delta[src + s])


def _emit_tile(value, outputs, tile, delta, stream):
    """Writes ``tile``'s advantages (from the scanned scratch) and value targets.

    With ``stream``, each row's aligned middle is stored non-temporally (it is not read again
    soon, and bypassing the caches leaves them to the inputs); its ends are stored plainly.
    """
    advantage, value_target = outputs
    n_rows, n_steps = value.shape
    first, start, steps = _unsigned(tile)
    width = _width(steps)
    last_row = np.uint64(n_rows - 1)
    four = np.uint64(4)
    line = np.uint64(LINE)
    for lane in range(ROWS):
        row = min(first + np.uint64(lane), last_row)
        src = np.uint64(lane) * width + width - steps
        offset = row * np.uint64(n_steps) + start
        head = steps
        body = np.uint64(0)
        if stream:  # whole cache lines only: a line written partly so is flushed partly
            misaligned = (advantage.ctypes.data + offset * four) % line
            head = min(steps, (line - misaligned) % line // four)
            body = (steps - head) // (line // four) * (line // four)
        _emit_plain(delta, src, value, outputs, row, start, np.uint64(0), head)
        for s in range(head, head + body, LANES):
            _gae_simd.emit8(
                advantage.ctypes.data + (offset + s) * four,
                value_target.ctypes.data + (offset + s) * four,
                delta.ctypes.data + (src + s) * four,
                value.ctypes.data + (offset + s) * four,
            )
        _emit_plain(delta, src, value, outputs, row, start, head + body, steps)


def _prefetch_rows(rows, tile, lanes):
    """Prefetches the steps of ``tile`` of lanes ``lanes`` (a range) of each array in ``rows``."""
    first, start, steps = _unsigned(tile)
    line = np.uint64(LINE)
    for x in rows:
        n_rows, n_steps = x.shape
        size = np.uint64(x.itemsize)
        for lane in lanes:
            row = min(first + np.uint64(lane), np.uint64(n_rows - 1))
            begin = x.ctypes.data + (row * np.uint64(n_steps) + start) * size
            for address in range(begin - begin % line, begin + steps * size, line):
                prefetch(address)


def _scan_and_prefetch(inputs, scratch, carry, tile, upcoming):
    """Scans ``tile`` in ``PARTS`` parts; after each, prefetches some rows of ``upcoming``.

    The scan reads only the scratch (in L1), so the next tile's inputs are loaded meanwhile,
    ``ROWS // PARTS`` rows after each part: spread out, as a few hundred cache lines at once
    overflow the queues of misses in flight (one, two or four parts measured slower than
    eight, sixteen no faster).
    """
    delta, decay = scratch
    width = _width(np.uint64(tile[2]))
    chunks = width // np.uint64(LANES)
    parts = np.uint64(PARTS)
    lanes = ROWS // PARTS
    for part in range(PARTS):
        end = chunks - chunks * np.uint64(part) // parts
        begin = chunks - chunks * np.uint64(part + 1) // parts
        _gae_simd.scan_chunks(
            delta.ctypes.data, decay.ctypes.data, width, carry.ctypes.data, begin, end
        )
        if upcoming[2] > 0:
            lane_range = range(part * lanes, (part + 1) * lanes)
            _prefetch_rows(inputs[:3], upcoming, lane_range)
            _prefetch_rows(inputs[3:], upcoming, lane_range)


def _aligned_scratch(size):
    """Two float32 arrays of ``size`` elements each, starting on a cache line."""
    buffer = np.empty(2 * size + 16, dtype=np.float32)
    skip = (np.uint64(64) - buffer.ctypes.data % np.uint64(64)) % np.uint64(64) // np.uint64(4)
    return buffer[skip : skip + size], buffer[skip + size : skip + 2 * size]


def _scan_rows_vector(inputs, coefs, outputs, last_done, first_is_init, is_init):
    """The float32 kernel: :func:`_scan_rows` with the scan in vector registers.

    ``is_init`` (bool ``[N, T]``) is written from ``first_is_init`` (``[N]``) when it has
    rows.
    """
    n_rows, n_steps = inputs[0].shape
    scratch = _aligned_scratch(ROWS * STEPS)
    delta = scratch[0]
    carry = np.zeros(ROWS, dtype=np.float32)
    stream = _streamable(outputs)
    derive = is_init.shape[0] > 0
    row = np.empty(STEPS, dtype=np.bool_)
    nonfinite = False
    tile = _tile(0, n_rows, n_steps)
    if tile[2] > 0:
        _prepare_tile(inputs, coefs, tile, scratch, last_done)
    k = 0
    while tile[2] > 0:
        if tile[1] + tile[2] == n_steps:  # a block's last steps come first: start afresh
            carry[:] = 0
        upcoming = _tile(k + 1, n_rows, n_steps)
        _scan_and_prefetch(inputs, scratch, carry, tile, upcoming)
        if tile[1] == 0:  # the rows' first steps: any non-finite input shows here
            nonfinite |= _any_nonfinite(carry)
        _emit_tile(inputs[1], outputs, tile, delta, stream)
        if derive:
            _shift_done(inputs[4], first_is_init, tile, is_init, row)
        k += 1
        tile = upcoming
        if tile[2] > 0:
            _prepare_tile(inputs, coefs, tile, scratch, last_done)
    if stream or derive:
        _gae_simd.store_fence()
    return nonfinite


def _view(address, shape, dtype):
    return numba.carray(voidptr(address), shape, dtype)


def _arrays_at(addresses, n_rows, n_steps, coefs, derive):
    """The kernel's arguments, viewing the tensors at ``addresses`` (see :func:`gae_scan_cpu`)."""
    rows = (n_rows, n_steps)
    real, flag = coefs.dtype, np.bool_
    inputs = (
        _view(addresses[0], rows, real),
        _view(addresses[1], rows, real),
        _view(addresses[2], rows, real),
        _view(addresses[3], rows, flag),
        _view(addresses[4], rows, flag),
    )
    outputs = (_view(addresses[5], rows, real), _view(addresses[6], rows, real))
    last_done = _view(addresses[7], (n_rows,), flag)
    derived = n_rows if derive else 0
    first = _view(addresses[8], (derived,), flag)
    is_init = _view(addresses[9], (derived, n_steps if derive else 0), flag)
    return inputs, (coefs[0], coefs[1]), outputs, last_done, first, is_init


def _vector_at(addresses, n_rows, n_steps, coefs, derive):
    return _scan_rows_vector(*_arrays_at(addresses, n_rows, n_steps, coefs, derive))


def _scalar_at(addresses, n_rows, n_steps, coefs, derive):
    return _scan_rows_scalar(*_arrays_at(addresses, n_rows, n_steps, coefs, derive))


if AVAILABLE:
    _jit_inline = numba.njit(cache=True, nogil=True, inline="always")
    _any_nonfinite = _jit_inline(_any_nonfinite)
    _td_step = _jit_inline(_td_step)
    _write_step = _jit_inline(_write_step)
    _prepare_step = _jit_inline(_prepare_step)
    _emit_step = _jit_inline(_emit_step)
    _scan_tile = _jit_inline(_scan_tile)
    _zeros = _jit_inline(_zeros)
    _tile = _jit_inline(_tile)
    _unsigned = _jit_inline(_unsigned)
    _emit_and_prepare = _jit_inline(_emit_and_prepare)
    _width = _jit_inline(_width)
    _prepare_tile = _jit_inline(_prepare_tile)
    _shift_done = _jit_inline(_shift_done)
    _streamable = _jit_inline(_streamable)
    _emit_plain = _jit_inline(_emit_plain)
    _emit_tile = _jit_inline(_emit_tile)
    _aligned_scratch = _jit_inline(_aligned_scratch)
    _prefetch_rows = _jit_inline(_prefetch_rows)
    _scan_and_prefetch = _jit_inline(_scan_and_prefetch)
    _scan_rows_scalar = numba.njit(cache=True, nogil=True)(_scan_rows_scalar)
    _scan_rows_vector = numba.njit(cache=True, nogil=True)(_scan_rows_vector)
    _view = _jit_inline(_view)
    _arrays_at = _jit_inline(_arrays_at)
    _vector_at = numba.njit(cache=True, nogil=True)(_vector_at)
    _scalar_at = numba.njit(cache=True, nogil=True)(_scalar_at)


_NO_ROWS = np.zeros(0, dtype=np.bool_)
_NO_IS_INIT = np.zeros((0, 0), dtype=np.bool_)


def _scan_rows(inputs, coefs, outputs, last_done, is_init=None):
    """GAE over ``[N, T]`` numpy rows; returns whether any input (or result) was not finite.

    Float32 runs the vector kernel; float64 the scalar one.

    Args:
        inputs: ``(reward, value, next_value, terminated, done)``, ``[N, T]`` each.
        coefs: ``(gamma, gamma * lmbda)`` as scalars of the inputs' dtype.
        outputs: ``(advantage, value_target)``, ``[N, T]`` each, written.
        last_done: bool ``[N]``, written: each row's last ``done`` flag.
        is_init: ``None``, or ``(first_is_init, is_init)``: bool ``[N]`` read and bool
            ``[N, T]`` written (``done`` one step later, ``first_is_init`` first).
    """
    first, out = (_NO_ROWS, _NO_IS_INIT) if is_init is None else is_init
    kernel = _scan_rows_vector if inputs[0].dtype == np.float32 else _scan_rows_scalar
    return kernel(inputs, coefs, outputs, last_done, first, out)


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
    first_is_init: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, bool, torch.Tensor, torch.Tensor | None]:
    """Runs the scan on ``[N, T, 1]`` inputs :func:`applies` accepted.

    Args:
        reward (torch.Tensor): rewards ``[N, T, 1]``.
        value (torch.Tensor): values of the states ``[N, T, 1]``.
        next_value (torch.Tensor): values of the next states ``[N, T, 1]``.
        terminated (torch.Tensor): bool ``[N, T, 1]``.
        done (torch.Tensor): bool ``[N, T, 1]``.
        gamma (float): discount.
        lmbda (float): GAE trace decay.
        first_is_init (torch.Tensor, optional): bool ``[N]``; when given, ``is_init`` (``done``
            one step later, this as its first column) is derived too. Defaults to ``None``.

    Returns:
        ``(advantage, value_target, nonfinite, last_done, is_init)``: two new ``[N, T, 1]``
        tensors, whether any input was NaN or infinite (or a result overflowed), the ``done``
        flag of each row's last step ``[N]``, and the bool ``[N, T]`` ``is_init`` (``None``
        without ``first_is_init``).
    """
    n_rows, n_steps = reward.shape[:2]
    advantage = torch.empty_like(reward)
    value_target = torch.empty_like(reward)
    last_done = torch.empty(n_rows, dtype=torch.bool)
    tensors = [reward, value, next_value, terminated, done, advantage, value_target, last_done]
    is_init = None
    if first_is_init is not None:
        is_init = torch.empty(n_rows, n_steps, dtype=torch.bool)
        tensors += [first_is_init.to(device="cpu", dtype=torch.bool).contiguous(), is_init]
    # the kernel views the tensors by address: numpy views of ten tensors cost more than the
    # kernel on small inputs (17 vs 8 us a call at 8 x 8)
    addresses = np.zeros(10, dtype=np.int64)  # the last two stay 0 without is_init
    addresses[: len(tensors)] = [x.data_ptr() for x in tensors]
    if reward.dtype == torch.float32:
        coefs = np.array([gamma, gamma * lmbda], dtype=np.float32)
        nonfinite = _vector_at(addresses, n_rows, n_steps, coefs, is_init is not None)
    else:
        coefs = np.array([gamma, gamma * lmbda], dtype=np.float64)
        nonfinite = _scalar_at(addresses, n_rows, n_steps, coefs, is_init is not None)
    return advantage, value_target, bool(nonfinite), last_done, is_init
