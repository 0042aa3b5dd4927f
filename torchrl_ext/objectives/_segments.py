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
digits in the longest segment (8 for 129 steps), fewer than zero-padded calls of segments of
similar lengths would take (compared on the GAE benchmark page, :doc:`/benchmarks/gae`).

Step ``k`` of a segment of length ``L`` lies in the piece of the highest bit where ``k`` and ``L``
differ, at offset ``k mod 2**j`` inside it. The calls' inputs are stored one after the other,
highest bit first, each time-major ``[2**j, lanes]``: the position of every step in that layout
is the plan's ``index``.

Two implementations give the same plan: torch operations for any device (the reference) and a
compiled loop for CPU tensors (:mod:`torchrl_ext.objectives._kernels.segment_plan`, one pass).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from torchrl_ext.objectives._kernels import segment_plan


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
    num_segments: int = field(init=False)
    size: int = field(init=False)  # steps in all: N * T + B
    pool_size: int = field(init=False)  # initial states, then the states each call reached

    def __post_init__(self) -> None:
        self.num_segments = int(self.first.numel())
        self.size = int(self.index.numel())
        self.pool_size = self.num_segments + sum(call.lanes for call in self.calls)


def boot_steps(done: torch.Tensor) -> torch.Tensor:
    """Flat indices of the steps followed by a bootstrap step: done steps and each row's last."""
    boot = done.clone()
    boot[:, -1] = True
    return torch.nonzero(boot.reshape(-1)).squeeze(1)


def plan_segments(is_init: torch.Tensor, done: torch.Tensor, chunk_len: int | None) -> Plan:
    """Cuts bool ``[N, T]`` rows into segments and schedules them (see the module docstring)."""
    if is_init.device.type == "cpu":
        return _plan_cpu(is_init, done, chunk_len)
    return plan_segments_torch(is_init, done, chunk_len)


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


def _plan_cpu(is_init: torch.Tensor, done: torch.Tensor, chunk_len: int | None) -> Plan:
    init_np = is_init.contiguous().numpy()
    done_np = done.contiguous().numpy()
    n_steps = done_np.size
    segments = np.empty((4, n_steps), dtype=np.int64)  # first, continues, lengths, booted
    steps = np.empty((3, 2 * n_steps), dtype=np.int64)  # index, reads, sources
    boot_idx = np.empty(n_steps, dtype=np.int64)
    calls = np.zeros((2, 64), dtype=np.int64)  # lanes and offsets per bit
    n_seg, n_boot, n_bits = segment_plan.plan(
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
