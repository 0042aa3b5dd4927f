"""One value-network pass over whole env rows, resetting recurrent state at episode starts.

The rollout ``[N, T]`` is cut into segments: a segment starts at ``t = 0``, where ``is_init`` is
set, after a ``done`` step, and (optionally) every ``chunk_len`` steps. Each segment that ends on a
``done`` step or on the last step of its row gets one extra step appended: the true final
observation ``("next", obs)``, evaluated with the state reached after the segment.

Segments are sorted by length and cut into a few groups of similar lengths; each group is one
dense, zero-padded ``[S_g, L_g]`` call of the ``torch.nn`` layer (padding only at the end of a
segment, where a causal layer cannot see it). The whole critic runs on this padded layout
(groups stored time-major, so each group's input and output are plain views) and only the
values are gathered back to the rows. Dense calls keep PyTorch's fused CPU kernel
(oneDNN) that a :class:`~torch.nn.utils.rnn.PackedSequence` would lose (measured 2.3x slower on
CPU with ~3 segments per row), at the price of a few percent of padding. Every step is still
computed once: one recurrent pass over the rows plus one extra step per bootstrap.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase, TensorDictSequential
from torch import nn
from torchrl.modules import GRUModule, LSTMModule

from torchrl_ext.objectives._layout import flat_rows, next_key

_RECURRENT = (LSTMModule, GRUModule)


@dataclass
class _Segments:
    """Where segments start and which steps get a bootstrap step appended (flat row-major)."""

    seg_id: torch.Tensor  # [N*T] segment of each step
    step: torch.Tensor  # [N*T] position of each step inside its segment
    first: torch.Tensor  # [S] flat index of each segment's first step
    continues: torch.Tensor  # [S] True where the segment continues an episode (no reset)
    boot_idx: torch.Tensor  # [B] flat index of the steps followed by a bootstrap step
    num_segments: int


def segment_rows(is_init: torch.Tensor, done: torch.Tensor, chunk_len: int | None) -> _Segments:
    """Cuts ``[N, T]`` rows into segments (see the module docstring)."""
    resets = is_init.clone()
    resets[:, 1:] |= done[:, :-1]
    start = resets.clone()
    start[:, 0] = True
    if chunk_len is not None:
        start[:, ::chunk_len] = True
    boot = done.clone()
    boot[:, -1] = True
    start_f = start.reshape(-1)
    seg_id = torch.cumsum(start_f, 0) - 1
    first = torch.nonzero(start_f).squeeze(1)
    step = torch.arange(start_f.numel(), device=start_f.device) - first[seg_id]
    return _Segments(
        seg_id=seg_id,
        step=step,
        first=first,
        continues=~resets.reshape(-1)[first],
        boot_idx=torch.nonzero(boot.reshape(-1)).squeeze(1),
        num_segments=int(first.numel()),
    )


#: A segment joins a group if it is at least this fraction of the group's longest segment...
GROUP_RELATIVE_LENGTH = 0.8
#: ...or at most this many steps shorter.
GROUP_SLACK_STEPS = 4


@dataclass
class _Groups:
    """Where each flat step goes in the zero-padded dense groups of segments."""

    index: torch.Tensor  # [M] position of each flat step in the padded groups (time-major)
    shapes: list[tuple[int, int, int]]  # (offset, segments, length) of each group
    order: torch.Tensor  # [S] segments sorted by decreasing length
    size: int  # total padded steps


def _group_bounds(lengths: list[int]) -> list[tuple[int, int, int]]:
    """Greedy ``(start, stop, length)`` groups over lengths sorted in decreasing order."""
    bounds, start = [], 0
    while start < len(lengths):
        top, stop = lengths[start], start
        while stop < len(lengths) and (
            lengths[stop] >= GROUP_RELATIVE_LENGTH * top or top - lengths[stop] <= GROUP_SLACK_STEPS
        ):
            stop += 1
        bounds.append((start, stop, top))
        start = stop
    return bounds


def group_segments(seg: _Segments) -> _Groups:
    """Places all steps (rows, then bootstrap steps) of all segments in dense groups."""
    boot_seg = seg.seg_id[seg.boot_idx]
    seg_all = torch.cat([seg.seg_id, boot_seg])
    step_all = torch.cat([seg.step, seg.step[seg.boot_idx] + 1])
    lengths = torch.bincount(seg_all, minlength=seg.num_segments)
    sorted_lengths, order = torch.sort(lengths, descending=True, stable=True)
    bounds = _group_bounds(sorted_lengths.tolist())
    # per sorted rank: where its first step sits and the stride between its steps (the
    # group's segment count, as groups are stored time-major [L_g, S_g])
    first = torch.empty(seg.num_segments, dtype=torch.long, device=lengths.device)
    stride = torch.empty_like(first)
    shapes, offset = [], 0
    for start, stop, length in bounds:
        count = stop - start
        first[start:stop] = offset + torch.arange(count, device=lengths.device)
        stride[start:stop] = count
        shapes.append((offset, count, length))
        offset += count * length
    rank = torch.empty_like(order)
    rank[order] = torch.arange(seg.num_segments, device=order.device)
    rank_all = rank[seg_all]
    index = first[rank_all] + step_all * stride[rank_all]
    return _Groups(index=index, shapes=shapes, order=order, size=offset)


def leaf_modules(network: TensorDictModuleBase) -> list[TensorDictModuleBase]:
    """Flattens nested :class:`~tensordict.nn.TensorDictSequential` into its leaf modules."""
    if isinstance(network, TensorDictSequential):
        leaves = []
        for module in network.module:
            leaves.extend(leaf_modules(module))
        return leaves
    return [network]


def check_recurrent_leaf(module: TensorDictModuleBase) -> None:
    """Raises if a recurrent leaf cannot run as a dense, causal ``torch.nn`` layer."""
    layer = module.lstm if isinstance(module, LSTMModule) else module.gru
    if type(layer) not in (nn.LSTM, nn.GRU):
        raise TypeError(
            f"value_network contains a {type(module).__name__} built with python_based=True "
            f"(layer {type(layer).__name__}); RecurrentGAE needs the torch.nn layer. "
            "Build it with python_based=False (the default)."
        )
    if layer.bidirectional:
        raise ValueError(
            f"value_network contains a bidirectional {type(module).__name__}; a critic must be "
            "causal, so bidirectional=True is not supported."
        )


class ValuePass:
    """Evaluates a (possibly recurrent) critic over ``[N, T]`` rows plus their bootstrap steps."""

    def __init__(self, network: TensorDictModuleBase):
        self.network = network
        self.leaves = leaf_modules(network)
        self.recurrent = [m for m in self.leaves if isinstance(m, _RECURRENT)]
        for module in self.recurrent:
            check_recurrent_leaf(module)
        state_keys = {k for m in self.recurrent for k in m.in_keys[1:]}
        self.obs_keys = [k for k in network.in_keys if k not in state_keys and k != "is_init"]

    def stored_state_keys(self) -> list:
        """Keys of the recurrent states read in ``"stored"`` mode."""
        return [k for m in self.recurrent for k in m.in_keys[1:] if k != "is_init"]

    def run(
        self,
        td: TensorDictBase,
        layout: tuple[int, int],
        is_init: torch.Tensor,
        done: torch.Tensor,
        value_key,
        initial_state: str,
        chunk_len: int | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns ``(value, next_value)``, both ``[N, T, *value_shape]``.

        Args:
            td (TensorDictBase): the rollout.
            layout (tuple of int): ``(batch_ndim, time_dim)`` of ``td``.
            is_init (torch.Tensor): bool ``[N, T]``.
            done (torch.Tensor): bool ``[N, T]``.
            value_key (NestedKey): where the critic writes its value.
            initial_state (str): ``"zeros"`` or ``"stored"``.
            chunk_len (int, optional): re-anchoring period.
        """
        n_rows, steps = done.shape
        seg = segment_rows(is_init, done, chunk_len if self.recurrent else None)
        groups = group_segments(seg) if self.recurrent else None
        flat = self._flat_inputs(td, layout, seg.boot_idx, groups)
        for module in self.leaves:
            if isinstance(module, _RECURRENT):
                self._run_recurrent(module, flat, td, layout, seg, groups, initial_state)
            else:
                flat = module(flat)
        out = flat.get(value_key)
        if groups is not None:
            out = out[groups.index]
        value = out[: n_rows * steps]
        next_value = torch.empty_like(value)
        next_value[:-1] = value[1:]
        next_value[seg.boot_idx] = out[n_rows * steps :]
        shape = (n_rows, steps, *out.shape[1:])
        return value.reshape(shape), next_value.reshape(shape)

    def _flat_inputs(
        self,
        td: TensorDictBase,
        layout: tuple[int, int],
        boot_idx: torch.Tensor,
        groups: _Groups | None,
    ) -> TensorDictBase:
        """The critic's inputs: rows then bootstrap steps, placed in the padded groups."""
        flat = None
        for key in self.obs_keys:
            root = flat_rows(td.get(key), *layout).flatten(0, 1)
            final = flat_rows(td.get(next_key(key)), *layout).flatten(0, 1)[boot_idx]
            steps = torch.cat([root, final])
            if groups is not None:
                steps = steps.new_zeros(groups.size, *steps.shape[1:]).index_copy_(
                    0, groups.index, steps
                )
            if flat is None:
                flat = TensorDict(batch_size=[steps.shape[0]], device=steps.device)
            flat.set(key, steps)
        return flat

    def _initial_state(
        self,
        key,
        shape: tuple[int, ...],
        td: TensorDictBase,
        layout: tuple[int, int],
        seg: _Segments,
        initial_state: str,
        like: torch.Tensor,
    ) -> torch.Tensor:
        if initial_state == "zeros":
            return like.new_zeros((seg.num_segments, *shape))
        stored = flat_rows(td.get(key), *layout).flatten(0, 1)[seg.first]
        keep = seg.continues.reshape(-1, *([1] * (stored.ndim - 1)))
        return torch.where(keep, stored, torch.zeros_like(stored)).to(like.dtype)

    def _run_recurrent(
        self,
        module: TensorDictModuleBase,
        flat: TensorDictBase,
        td: TensorDictBase,
        layout: tuple[int, int],
        seg: _Segments,
        groups: _Groups,
        initial_state: str,
    ) -> None:
        is_lstm = isinstance(module, LSTMModule)
        layer = module.lstm if is_lstm else module.gru
        x = flat.get(module.in_keys[0])
        h_size = layer.proj_size if is_lstm and layer.proj_size > 0 else layer.hidden_size
        shapes = [(layer.num_layers, h_size)]
        if is_lstm:
            shapes.append((layer.num_layers, layer.hidden_size))
        states = [
            self._initial_state(key, shape, td, layout, seg, initial_state, x)[groups.order]
            for key, shape in zip(module.in_keys[1:], shapes, strict=False)
        ]
        outputs = []
        first = 0
        for offset, count, length in groups.shapes:
            block = x[offset : offset + count * length].view(length, count, *x.shape[1:])
            hidden = [s[first : first + count].transpose(0, 1).contiguous() for s in states]
            # the layer is batch_first: hand it a batch-first view of time-major memory
            out, _ = layer(block.transpose(0, 1), tuple(hidden) if is_lstm else hidden[0])
            outputs.append(out.transpose(0, 1).reshape(count * length, -1))
            first += count
        flat.set(module.out_keys[0], torch.cat(outputs))
