"""Cutting ``[N, T]`` rollout rows into segments, and segments into dense recurrent-layer calls.

**Segments.** A segment starts at ``t = 0``, where ``is_init`` is set, after a ``done`` step, and
(optionally) every ``chunk_len`` steps. It resets its recurrent state unless it starts at ``t = 0``
or at a ``chunk_len`` anchor without ``is_init`` (then it *continues* an episode). A segment that
ends on a ``done`` step or on the last step of its row gets one extra step: its bootstrap step,
the true final observation ``("next", obs)``.

**Calls.** A dense call of a ``torch.nn`` recurrent layer runs ``lanes`` sequences of one common
``length`` from given initial states. Each segment is cut by the binary digits of its length
``L`` (bootstrap step included), highest first: ``L = 37`` becomes pieces of 32, 4 and 1 steps,
in that order in time. Call ``j`` runs the ``2**j``-step piece of every segment whose length has
bit ``j`` set, each lane starting from the state the segment's earlier pieces reached, and the
calls run from the highest bit down. So no step is padded and there are as many calls as binary
digits in the longest segment (8 for 129 steps); grouping segments of similar lengths into
zero-padded calls instead cost 10% more steps and 12 calls on a typical rollout.

Step ``k`` of a segment of length ``L`` lies in the piece of the highest bit where ``k`` and ``L``
differ, at offset ``k mod 2**j`` inside it. The calls' inputs are stored one after the other,
highest bit first, each time-major ``[2**j, lanes]``: the position of every step in that layout
is the plan's ``index``.

Two implementations give the same plan: a compiled loop for CPU tensors (numba, one pass) and
torch operations for any device (and as the tests' cross-check).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

try:
    import numba

    from torchrl_ext._native.intrinsics import memcpy
except ImportError:  # pragma: no cover - numba is a dependency; this keeps the torch path alive
    numba = None


@dataclass
class Call:
    """One dense call of the layer: ``lanes`` segment pieces of ``length`` steps each.

    Recurrent states live in a pool: rows ``[0, S)`` hold each segment's initial state, and
    each call appends the states its lanes reached (at ``slot``). A lane starts from the pool
    row ``sources[lane]``: its segment's initial state for a first piece, else the state the
    segment's previous piece reached.
    """

    offset: int  # first row of the call's time-major block in the layout
    lanes: int
    length: int
    sources: torch.Tensor  # [lanes] pool row each lane starts from
    slot: int  # pool row of the state reached by the call's first lane


@dataclass
class Plan:
    """Segments of ``[N, T]`` rows and where each of their steps goes in the layer calls.

    Steps are numbered flat: the ``N * T`` row steps (row-major), then the bootstrap steps in
    the order of ``boot_idx``.
    """

    boot_idx: torch.Tensor  # [B] flat index of each step followed by a bootstrap step
    first: torch.Tensor  # [S] flat index of each segment's first step
    continues: torch.Tensor  # [S] bool: the segment continues an episode (no reset)
    index: torch.Tensor  # [N * T + B] position of each step in the calls' layout
    reads: torch.Tensor  # [N * T + B] what each position reads: a row step i, or N * T + i for
    # the final observation ("next") of row step i
    calls: list[Call]  # in the order to run them

    @property
    def num_segments(self) -> int:
        return int(self.first.numel())

    @property
    def pool_size(self) -> int:
        """Rows of the state pool: initial states, then the states each call reached."""
        return self.num_segments + sum(call.lanes for call in self.calls)

    @property
    def size(self) -> int:
        return int(self.index.numel())


def boot_steps(done: torch.Tensor) -> torch.Tensor:
    """Flat indices of the steps followed by a bootstrap step: done steps and each row's last."""
    boot = done.clone()
    boot[:, -1] = True
    return torch.nonzero(boot.reshape(-1)).squeeze(1)


def plan_segments(is_init: torch.Tensor, done: torch.Tensor, chunk_len: int | None) -> Plan:
    """Cuts bool ``[N, T]`` rows into segments and schedules them (see the module docstring)."""
    if numba is not None and is_init.device.type == "cpu":
        return _plan_compiled(is_init, done, chunk_len)
    return plan_segments_torch(is_init, done, chunk_len)


def gather_steps(root: torch.Tensor, final: torch.Tensor, reads: torch.Tensor) -> torch.Tensor:
    """The critic's inputs in the calls' layout: row ``p`` is row ``reads[p]`` of both, stacked.

    ``root`` holds the ``N * T`` row steps' inputs and ``final`` their next observations. On
    the CPU a compiled loop copies the rows: 0.07 ms at 256 x 128 with 8 floats a row, where
    joining the two and ``index_select`` take 0.16 ms.
    """
    if (
        numba is not None
        and root.is_cpu
        and final.is_cpu
        and root.dtype == final.dtype
        and root.shape[1:] == final.shape[1:]
        and reads.is_cpu
        and root.is_contiguous()
        and final.is_contiguous()
        and root.numel() > 0
    ):
        out = root.new_empty((reads.numel(), *root.shape[1:]))
        _copy_rows(_bytes(root), _bytes(final), reads.numpy(), _bytes(out))
        return out
    return torch.cat([root, final]).index_select(0, reads)


def _bytes(x: torch.Tensor) -> np.ndarray:
    """A contiguous tensor's rows as a ``[rows, row_bytes]`` uint8 array (a view)."""
    return x.reshape(x.shape[0], -1).view(torch.uint8).numpy()


def _copy_rows(first, second, reads, out):
    """``out[p] = (first, second stacked)[reads[p]]``, row by row with ``memcpy``."""
    size = out.shape[1]
    n_first = first.shape[0]
    for p in range(reads.size):
        r = reads[p]
        if r < n_first:
            source = first.ctypes.data + r * size
        else:
            source = second.ctypes.data + (r - n_first) * size
        memcpy(out.ctypes.data + p * size, source, size)


# ------------------------------------------------------------------ torch (any device)
def plan_segments_torch(is_init: torch.Tensor, done: torch.Tensor, chunk_len: int | None) -> Plan:
    """:func:`plan_segments` with torch operations only."""
    resets = is_init.clone()
    resets[:, 1:] |= done[:, :-1]
    start = resets.clone()
    start[:, 0] = True
    if chunk_len is not None:
        start[:, ::chunk_len] = True
    start_f = start.reshape(-1)
    seg_id = torch.cumsum(start_f, 0) - 1
    first = torch.nonzero(start_f).squeeze(1)
    step = torch.arange(start_f.numel(), device=start_f.device) - first[seg_id]
    boot_idx = boot_steps(done)
    seg_all = torch.cat([seg_id, seg_id[boot_idx]])
    step_all = torch.cat([step, step[boot_idx] + 1])
    lengths = torch.bincount(seg_all, minlength=first.numel())
    index, calls = _schedule_torch(lengths, seg_all, step_all)
    reads = torch.empty_like(index)
    reads[index] = torch.cat([torch.arange(start_f.numel(), device=index.device), boot_idx])
    reads[index[start_f.numel() :]] += start_f.numel()
    return Plan(
        boot_idx=boot_idx,
        first=first,
        continues=~resets.reshape(-1)[first],
        index=index,
        reads=reads,
        calls=calls,
    )


def _schedule_torch(
    lengths: torch.Tensor, seg_all: torch.Tensor, step_all: torch.Tensor
) -> tuple[torch.Tensor, list[Call]]:
    n_seg, n_bits = lengths.numel(), int(lengths.max()).bit_length()
    bit_ids = torch.arange(n_bits, device=lengths.device)
    bits = 1 << bit_ids
    has = (lengths.unsqueeze(1) & bits) != 0  # [S, J]: the segment has a piece in call j
    lanes = has.sum(0)
    lane = torch.cumsum(has, 0) - 1  # [S, J]: its lane there
    sizes = lanes * bits
    offsets = sizes.flip(0).cumsum(0).flip(0) - sizes  # highest bit first
    piece = _log2(lengths[seg_all] ^ step_all)
    within = step_all & (bits[piece] - 1)
    index = offsets[piece] + within * lanes[piece] + lane.view(-1)[seg_all * n_bits + piece]
    # pool rows: the state after (s, j) is at slot[j] + lane; the piece before (s, j) is the
    # lowest set bit of the length above j
    slots = n_seg + lanes.flip(0).cumsum(0).flip(0) - lanes
    reached = slots + lane
    higher = lengths.unsqueeze(1) >> (bit_ids + 1)
    before = (bit_ids + 1 + _log2(higher & -higher)).clamp(max=n_bits - 1)
    initial = torch.arange(n_seg, device=lengths.device).unsqueeze(1)
    sources = torch.where(higher > 0, reached.gather(1, before), initial)
    calls = [
        Call(
            offset=int(offsets[j]),
            lanes=int(lanes[j]),
            length=1 << j,
            sources=sources[has[:, j], j],
            slot=int(slots[j]),
        )
        for j in reversed(range(n_bits))
        if int(lanes[j])
    ]
    return index, calls


def _log2(x: torch.Tensor) -> torch.Tensor:
    """``floor(log2(x))`` of positive integers below ``2**24`` (-1 for 0)."""
    return torch.frexp(x.float()).exponent.long() - 1


# ------------------------------------------------------------------ compiled (CPU)
def _plan_compiled(is_init: torch.Tensor, done: torch.Tensor, chunk_len: int | None) -> Plan:
    init_np = is_init.contiguous().numpy()
    done_np = done.contiguous().numpy()
    n_steps = done_np.size
    segments = np.empty((4, n_steps), dtype=np.int64)  # first, continues, lengths, booted
    steps = np.empty((3, 2 * n_steps), dtype=np.int64)  # index, reads, sources
    boot_idx = np.empty(n_steps, dtype=np.int64)
    calls = np.zeros((2, 64), dtype=np.int64)  # lanes and offsets per bit
    n_seg, n_boot, n_bits = _plan(
        init_np, done_np, chunk_len or 0, segments, boot_idx, calls, steps
    )
    size = n_steps + n_boot
    sources = torch.from_numpy(steps[2])
    plan_calls, start = [], 0
    for j in reversed(range(n_bits)):
        count = int(calls[0, j])
        if count:
            call_sources = sources[start : start + count]
            plan_calls.append(Call(int(calls[1, j]), count, 1 << j, call_sources, n_seg + start))
            start += count
    return Plan(
        boot_idx=torch.from_numpy(boot_idx[:n_boot]),
        first=torch.from_numpy(segments[0, :n_seg]),
        continues=torch.from_numpy(segments[1, :n_seg].astype(np.bool_)),
        index=torch.from_numpy(steps[0, :size]),
        reads=torch.from_numpy(steps[1, :size]),
        calls=plan_calls,
    )


def _plan(is_init, done, chunk_len, segments, boot_idx, calls, steps):
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


if numba is not None:
    _find_segments = numba.njit(cache=True, nogil=True, inline="always")(_find_segments)
    _schedule = numba.njit(cache=True, nogil=True, inline="always")(_schedule)
    _plan = numba.njit(cache=True, nogil=True)(_plan)
    _copy_rows = numba.njit(cache=True, nogil=True)(_copy_rows)
