"""How :class:`~torchrl_ext.data.Sequence` expands anchors into windows of records.

A :class:`WindowSpec` says what a window is (its geometry, boundary policy and layout), and a
:class:`WindowBuilder` builds one unit's windows from it: the records' coordinates, their
per-record info, and the sampler's per-anchor info repeated over each window. Two paths build
the same records: :func:`records_compiled`, one compiled loop for done-flag boundaries on CPU,
and :func:`records_vectorized`, batched tensor ops over a
:class:`~torchrl_ext.data._episodes.Reach` (any device, trajectory ids).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from tensordict.utils import NestedKey

from torchrl_ext.data import _episodes
from torchrl_ext.data._kernels import windows as kernel

#: The compiled loop's mode for each ``episode_boundary``.
MODES = {
    "pad": kernel.PAD,
    "stop": kernel.STOP,
    "include_reset": kernel.CROSS,
}


@dataclasses.dataclass(frozen=True)
class WindowSpec:
    """What each anchor of a :class:`~torchrl_ext.data.Sequence` expands into.

    The unit's settings of the same names, fixed at construction.
    """

    burn_in: int
    length: int
    bootstrap: int
    stride: int
    episode_boundary: str
    layout: str
    is_init_key: NestedKey

    @property
    def window(self) -> int:
        """Records per anchor: ``burn_in + length + bootstrap``."""
        return self.burn_in + self.length + self.bootstrap

    @property
    def forward(self) -> int:
        """Storage steps from the anchor to the window's last record."""
        return (self.length + self.bootstrap - 1) * self.stride

    @property
    def back(self) -> int:
        """Storage steps a window may reach before its anchor (``"stop"`` shifts it back)."""
        back = self.burn_in * self.stride
        return back + self.forward if self.episode_boundary == "stop" else back

    @property
    def kernel_geometry(self) -> tuple[int, int, int, int, int, int]:
        """``(burn_in, length, stride, back, forward, mode)`` for the compiled loop."""
        return (
            self.burn_in,
            self.length,
            self.stride,
            self.back,
            self.forward,
            MODES[self.episode_boundary],
        )


class WindowBuilder:
    """Builds the windows of one unit, keeping the per-device constants they are laid out with.

    Args:
        spec (WindowSpec): the unit's windows.
    """

    def __init__(self, spec: WindowSpec) -> None:
        self.spec = spec
        #: window offsets (int32), learning mask and steps, by device
        self._tables: dict[torch.device, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def build(
        self,
        view: _episodes.Snapshot,
        time: torch.Tensor,
        lanes: tuple[torch.Tensor, ...],
        anchors: torch.Tensor,
        info: dict[str, Any],
        use_compiled: bool,
        trajectories: Callable[[], _episodes.TrajectoryIndex] | None,
    ) -> tuple[torch.Tensor | tuple, dict[str, Any]]:
        """Record coordinates and the info with per-anchor entries repeated, per-record added.

        Args:
            view (Snapshot): what the sample reads from the storage.
            time (torch.Tensor): the anchors' time coordinates ``[B]``.
            lanes (tuple of torch.Tensor): their lane coordinates ``[B]``, one per lane dim.
            anchors (torch.Tensor): the anchors as one tensor (``[B]``, or ``[B, ndim]``).
            info (dict): the sampler's info.
            use_compiled (bool): the unit's ``use_compiled``.
            trajectories (callable or None): returns the unit's trajectory index, called only
                when the windows need it; ``None`` when episodes are read in storage order.

        Raises:
            ValueError: if a per-anchor info entry does not have one row per anchor.
        """
        expanded = expand_info(info, time.shape[0], self.spec)
        if trajectories is None and compiled_applies(use_compiled, view, time, lanes):
            index, per_record = records_compiled(view, time, lanes, self.spec)
        else:
            reach = self._reach(view, time, lanes, trajectories)
            table = self._table(time.device)
            index, per_record = records_vectorized(reach, table, time, lanes, anchors, self.spec)
        return index, {**expanded, **per_record}

    def _reach(
        self,
        view: _episodes.Snapshot,
        time: torch.Tensor,
        lanes: tuple[torch.Tensor, ...],
        trajectories: Callable[[], _episodes.TrajectoryIndex] | None,
    ) -> _episodes.Reach:
        """The storage around each anchor, from trajectory ids or in storage order."""
        spec = self.spec
        if trajectories is not None:
            return trajectories().reach(time, spec.back, spec.forward)
        crosses = spec.episode_boundary == "include_reset"
        flags = view.flags if not crosses or spec.layout == "batch_time" else None
        return _episodes.reach_in_storage_order(
            view, flags, time, lanes, spec.back, spec.forward, crosses
        )

    def _table(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Window offsets (int32), learning mask and steps on ``device``, made on first use."""
        table = self._tables.get(device)
        if table is None:
            spec = self.spec
            steps = torch.arange(spec.window, device=device)
            offsets = ((steps - spec.burn_in) * spec.stride).to(torch.int32)
            learning = (steps >= spec.burn_in) & (steps < spec.burn_in + spec.length)
            table = self._tables[device] = (offsets, learning, steps)
        return table


def compiled_applies(
    use_compiled: bool,
    view: _episodes.Snapshot,
    time: torch.Tensor,
    lanes: tuple[torch.Tensor, ...],
) -> bool:
    """The compiled loop serves done-flag boundaries on CPU, one lane dimension at most.

    Args:
        use_compiled (bool): the unit's ``use_compiled``.
        view (Snapshot): what the sample reads from the storage.
        time (torch.Tensor): the anchors' time coordinates ``[B]``.
        lanes (tuple of torch.Tensor): their lane coordinates, one per lane dim.
    """
    return (
        use_compiled
        and kernel.AVAILABLE
        and time.device.type == "cpu"
        and len(lanes) <= 1
        and (view.flags is None or (view.flags.is_cpu and not view.flags.is_floating_point()))
    )


def records_compiled(
    view: _episodes.Snapshot,
    time: torch.Tensor,
    lanes: tuple[torch.Tensor, ...],
    spec: WindowSpec,
) -> tuple[torch.Tensor | tuple, dict[str, torch.Tensor]]:
    """Record time coordinates and per-record info, all written by one compiled loop.

    Two fresh blocks (int64 and bool) hold every returned tensor as a non-overlapping view,
    already laid out flat or ``[B, window]``.

    Args:
        view (Snapshot): what the sample reads from the storage.
        time (torch.Tensor): the anchors' time coordinates ``[B]``.
        lanes (tuple of torch.Tensor): their lane coordinates, at most one lane dim.
        spec (WindowSpec): the windows.
    """
    num, window = time.shape[0], spec.window
    shape = (num * window,) if spec.layout == "flat" else (num, window)
    ints = torch.empty(4 + len(lanes), *shape, dtype=torch.int64)
    bools = torch.empty(3, *shape, dtype=torch.bool)
    flags = view.flags
    kernel.expand_records(
        None if flags is None else flags.reshape(flags.shape[0], -1),
        time.contiguous(),
        lanes[0].contiguous() if lanes else None,
        (view.written, view.oldest, view.newest),
        spec.kernel_geometry,
        window,
        ints,
        bools,
    )
    positions, sequence_id, steps, anchor, *lane = ints.unbind(0)
    valid, learning, starts = bools.unbind(0)
    per_record = {
        "sequence_id": sequence_id,
        "step_in_sequence": steps,
        "learning_mask": learning,
        "validity_mask": valid,
        "anchor_index": torch.stack((anchor, *lane), -1) if lane else anchor,
    }
    if spec.layout == "batch_time":
        per_record[spec.is_init_key] = starts
    return ((positions, *lane) if lane else positions), per_record


def records_vectorized(
    reach: _episodes.Reach,
    table: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    time: torch.Tensor,
    lanes: tuple[torch.Tensor, ...],
    anchors: torch.Tensor,
    spec: WindowSpec,
) -> tuple[torch.Tensor | tuple, dict[str, torch.Tensor]]:
    """Record coordinates and per-record info from batched tensor ops (any device).

    Args:
        reach (Reach): the storage around each anchor.
        table (tuple of torch.Tensor): offsets, learning mask and steps on the anchors'
            device (:meth:`WindowBuilder._table`).
        time (torch.Tensor): the anchors' time coordinates ``[B]``.
        lanes (tuple of torch.Tensor): their lane coordinates ``[B]``, one per lane dim.
        anchors (torch.Tensor): the anchors as one tensor (``[B]``, or ``[B, ndim]``).
        spec (WindowSpec): the windows.
    """
    num = time.shape[0]
    offsets, learning, steps = table
    # columns index the reach (steps -back .. forward around the drawn anchor); int32
    # arithmetic is cheaper on these small broadcast blocks
    column = offsets + reach.back
    if spec.episode_boundary == "stop":
        column = column - stop_shift(reach, spec.forward).to(torch.int32).unsqueeze(1)
    lowest = (reach.back - reach.to_start).to(torch.int32).unsqueeze(1)
    highest = (reach.back + reach.to_stop).to(torch.int32).unsqueeze(1)
    clamped = torch.minimum(torch.maximum(column, lowest), highest)
    valid = clamped == column
    per_record = {  # views over the batch; lay_out makes them real tensors
        "sequence_id": torch.arange(num, device=time.device).unsqueeze(1).expand_as(valid),
        "step_in_sequence": steps.expand_as(valid),
        "learning_mask": learning.expand_as(valid),
        "validity_mask": valid,
        "anchor_index": anchors.unsqueeze(1).expand(num, spec.window, *anchors.shape[1:]),
    }
    if spec.layout == "batch_time":
        per_record[spec.is_init_key] = window_starts(valid, reach, clamped)
    coords = (reach.positions(clamped), *(lane.unsqueeze(1).expand_as(valid) for lane in lanes))
    coords = tuple(lay_out(c, spec.layout) for c in coords)
    index = coords if lanes else coords[0]
    return index, {key: lay_out(value, spec.layout) for key, value in per_record.items()}


def stop_shift(reach: _episodes.Reach, forward: int) -> torch.Tensor:
    """How far ``"stop"`` moves each window back so it ends on its episode's last record.

    Args:
        reach (Reach): the storage around each anchor.
        forward (int): steps the window reaches past its anchor.
    """
    shortfall = (forward - reach.to_stop).clamp_(min=0)
    return torch.minimum(shortfall, reach.to_start)


def window_starts(
    valid: torch.Tensor, reach: _episodes.Reach, column: torch.Tensor
) -> torch.Tensor:
    """``is_init`` of a ``[B, window]`` batch: window start, valid-part start, new episodes.

    Args:
        valid (torch.Tensor): bool ``[B, window]``, the valid records.
        reach (Reach): the storage around each anchor.
        column (torch.Tensor): ``[B, window]``, each record's column of the reach.
    """
    starts = torch.zeros_like(valid)
    starts[:, 0] = True
    starts[:, 1:] = valid[:, 1:] & ~valid[:, :-1]
    if reach.episode is not None:
        episode = reach.episode.gather(1, column)
        starts[:, 1:] |= episode[:, 1:] != episode[:, :-1]
    return starts


def expand_info(info: dict[str, Any], num: int, spec: WindowSpec) -> dict[str, Any]:
    """Repeats per-anchor entries over their windows; leaves scalars alone.

    Args:
        info (dict): the sampler's info.
        num (int): the number of anchors.
        spec (WindowSpec): the windows.

    Raises:
        ValueError: if a per-anchor entry does not have one row per anchor.
    """
    out = {}
    for key, value in info.items():
        if isinstance(value, tuple):
            value = torch.stack([torch.as_tensor(v) for v in value], -1)
        try:
            tensor = torch.as_tensor(value)
        except (TypeError, ValueError, RuntimeError):
            out[key] = value
            continue
        if tensor.ndim == 0:
            out[key] = value
            continue
        if tensor.shape[0] != num:
            raise ValueError(
                f"info entry {key!r} has {tensor.shape[0]} rows but the sampler drew "
                f"{num} anchors; per-anchor info must have one row per anchor."
            )
        out[key] = lay_out(
            tensor.unsqueeze(1).expand(num, spec.window, *tensor.shape[1:]), spec.layout
        )
    return out


def lay_out(value: torch.Tensor, layout: str) -> torch.Tensor:
    """A ``[B, window, ...]`` tensor (or view) as a real tensor, flat or ``[B, window]``.

    Args:
        value (torch.Tensor): ``[B, window, ...]``.
        layout (str): ``"flat"`` or ``"batch_time"``.
    """
    if layout == "flat":
        return value.reshape(-1, *value.shape[2:])
    return value.contiguous()
