"""The row gather of long CPU reads: the compiled path of the fast storages' read.

A sample of sequence windows reads a few dozen runs of consecutive rows scattered over the
storage, for every leaf. ``index_select`` (the reference, which reads everything else) copies
one leaf row after row, then the next leaf: the hardware prefetcher picks up a run only after
its first lines missed and stops at every 4 KiB page, so a storage larger than the last-level
cache is read a few misses at a time, and rows of a few bytes (a done flag) cost more in
per-row overhead than in data. :func:`copy_rows` reads the same rows, bit for bit, in one pass
over all leaves:

1. the index is cut into runs: rows ascending by one (a window) or one row repeated (the
   padding of a window at an episode's ends);
2. before a run is copied, the next runs of every leaf are prefetched into L2 until
   ``BUDGET`` cache lines are in flight, so that the misses of several rows, leaves and
   windows overlap;
3. each run of each leaf is copied with one ``memcpy`` (a repeated row by doubling copies).

Rows are copied as raw bytes, whatever their dtype. The storage uses the kernel for indices of
``MIN_ROWS`` rows or more and leaves with rows of at most ``MAX_ROW_BYTES`` bytes
(:func:`supports`); below and above, its fixed cost is not repaid.

Why it exists: a sample's read is a large share of a whole sample, and overlapping its cache
misses shortens it most on storages larger than the caches (measured on the sequence-replay
benchmark page, :doc:`/benchmarks/replay`, "Compiled paths and their references").
"""

from __future__ import annotations

import math

import numpy as np
import torch

try:
    import numba

    from torchrl_ext._native.intrinsics import memcpy, prefetch

    AVAILABLE = True
except ImportError:  # pragma: no cover - numba is a dependency
    numba = None
    AVAILABLE = False

#: Cache lines of the runs after the one being copied that are prefetched (all leaves).
BUDGET = 32
#: Bytes of one run of one leaf that are prefetched (the hardware prefetcher follows on).
PREFETCH_RUN = 16 << 10
#: Shortest index read by the kernel: below, its fixed cost (cold, tens of microseconds) is
#: more than what it saves.
MIN_ROWS = 4096
#: Widest row copied by the kernel: wider rows are long blocks that ``index_select`` copies
#: as fast, and the kernel's fixed cost is not repaid.
MAX_ROW_BYTES = 1024
#: Bytes of a cache line.
LINE = 64


if AVAILABLE:

    @numba.njit(cache=True, nogil=True, boundscheck=False)
    def _run_end(index, i):
        """End of the run starting at ``i``: rows ascending by 1, or one row repeated."""
        n = index.shape[0]
        if i + 1 == n:
            return n
        step = index[i + 1] - index[i]
        if step != 0 and step != 1:
            return i + 1
        j = i + 2
        while j < n and index[j] - index[j - 1] == step:
            j += 1
        return j

    @numba.njit(cache=True, nogil=True, boundscheck=False)
    def _runs(index, rows, starts):
        """Cuts ``index`` into runs: run ``r`` is ``index[starts[r]:starts[r + 1]]``.

        A run is rows ascending by 1 or one row repeated. Returns the number of runs, or -1
        when an entry is not in ``[0, rows)``.
        """
        n, count, i = index.shape[0], 0, 0
        while i < n:
            j = _run_end(index, i)
            if min(index[i], index[j - 1]) < 0 or max(index[i], index[j - 1]) >= rows:
                return -1
            starts[count] = i
            count += 1
            i = j
        starts[count] = n
        return count

    @numba.njit(cache=True, nogil=True, boundscheck=False)
    def _prefetch_run(table, index, starts, r):
        """Prefetches run ``r`` of every leaf (at most ``PREFETCH_RUN`` bytes of each).

        Returns the number of cache lines prefetched.
        """
        first, last, lines = index[starts[r]], index[starts[r + 1] - 1], 0
        for leaf in range(table.shape[0]):
            source, size = table[leaf, 0], table[leaf, 1]
            begin = source + first * size
            end = min(source + (last + 1) * size, begin + PREFETCH_RUN)
            for address in range(begin - begin % LINE, end, LINE):
                prefetch(address)
                lines += 1
        return lines

    @numba.njit(cache=True, nogil=True, boundscheck=False)
    def _copy_run(table, leaf, index, begin, end):
        """Copies run ``index[begin:end]`` of leaf ``leaf`` to its output."""
        source, size, out = table[leaf, 0], table[leaf, 1], table[leaf, 2]
        count = end - begin
        destination = out + begin * size
        if count == 1 or index[begin + 1] != index[begin]:
            memcpy(destination, source + index[begin] * size, count * size)
            return
        memcpy(destination, source + index[begin] * size, size)
        filled = 1  # a repeated row: double the copies already made
        while filled < count:
            more = min(filled, count - filled)
            memcpy(destination + filled * size, destination, more * size)
            filled += more

    @numba.njit(cache=True, nogil=True, boundscheck=False)
    def _copy_leaves(flat_table, index, rows, budget):
        """``out[i] = source[index[i]]`` for every leaf ``(source, row bytes, out)`` of ``table``.

        The index is copied run by run, each run as blocks, while the runs after it are
        prefetched until ``budget`` cache lines are in flight. Returns ``False`` (nothing copied)
        when an entry of ``index`` is not in ``[0, rows)``.
        """
        table = flat_table.reshape(-1, 3)
        starts = np.empty(index.shape[0] + 1, dtype=np.int64)
        count = _runs(index, rows, starts)
        if count < 0:
            return False
        lines = np.empty(count, dtype=np.int64)
        ahead, pending = 0, 0
        for r in range(count):
            while ahead < count and (ahead <= r or pending < budget):
                lines[ahead] = _prefetch_run(table, index, starts, ahead)
                pending += lines[ahead]
                ahead += 1
            for leaf in range(table.shape[0]):
                _copy_run(table, leaf, index, starts[r], starts[r + 1])
            pending -= lines[r]
        return True


def supports(tensor: torch.Tensor) -> bool:
    """Whether :func:`copy_rows` should copy ``tensor``'s rows (else use ``index_select``).

    Contiguous CPU tensors (not lazy conjugate or negative views, not quantized, not requiring
    grad) whose rows hold 1 to ``MAX_ROW_BYTES`` bytes.
    """
    row_bytes = math.prod(tensor.shape[1:]) * tensor.element_size()
    return (
        AVAILABLE
        and 0 < row_bytes <= MAX_ROW_BYTES
        and tensor.is_cpu
        and tensor.layout == torch.strided
        and tensor.ndim >= 1
        and tensor.is_contiguous()
        and not (tensor.is_quantized or tensor.is_conj() or tensor.is_neg())
        and not tensor.requires_grad
    )


def takes(index: torch.Tensor) -> bool:
    """Whether :func:`copy_rows` should read with ``index``: ``MIN_ROWS`` or more, on the CPU."""
    return AVAILABLE and index.is_cpu and index.shape[0] >= MIN_ROWS


def copy_rows(index: torch.Tensor, rows: int, copies: list[tuple]) -> bool:
    """``out.copy_(source[index])`` for every ``(source, out, row_bytes)`` of ``copies``.

    Args:
        index (torch.Tensor): a non-empty flat int64 or int32 CPU index.
        rows (int): rows that may be read (``<=`` every source's first dim).
        copies (list of tuple): ``(source, out, row_bytes)``: a tensor :func:`supports` takes,
            a new contiguous tensor ``[len(index), *features]`` of its dtype, and the bytes of
            one row (``> 0``).

    Returns:
        ``False`` when an entry of ``index`` is not in ``[0, rows)`` (nothing copied), else
        ``True``.

    Examples:
        >>> import torch
        >>> from torchrl_ext.data._kernels.gather import copy_rows
        >>> values, out = torch.arange(12.0).view(6, 2), torch.empty(4, 2)
        >>> copy_rows(torch.tensor([4, 5, 0, 0]), 6, [(values, out, 8)])
        True
        >>> out
        tensor([[ 8.,  9.],
                [10., 11.],
                [ 0.,  1.],
                [ 0.,  1.]])
        >>> copy_rows(torch.tensor([4, 5]), 5, [(values, out, 8)])
        False
    """
    table = []
    for source, out, size in copies:
        table += (source.data_ptr(), size, out.data_ptr())
    return _copy_leaves(np.array(table, dtype=np.int64), index.contiguous().numpy(), rows, BUDGET)
