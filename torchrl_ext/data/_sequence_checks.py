"""What :class:`~torchrl_ext.data.Sequence` reads when it expands anchors, and its checks.

The storage (read once per sample, its stored entries checked once per contents: none that a
per-record info entry of the sample would overwrite) and the anchors a sampler drew (integer
coordinates of written records).
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict.utils import NestedKey

from torchrl_ext.data import _episodes

#: Per-record info entries every ``Sequence`` sample carries.
RECORD_KEYS = ("sequence_id", "step_in_sequence", "validity_mask", "learning_mask", "anchor_index")


def read_storage(
    storage: Any,
    done_key: NestedKey | None,
    owner: str,
    known: tuple[Any, torch.Tensor | None] | None,
    layout: str,
    is_init_key: NestedKey,
) -> tuple[_episodes.Snapshot, tuple[Any, torch.Tensor | None]]:
    """Everything a sample reads from the storage, read here and nowhere else.

    The done flags and the check of stored keys are kept while the storage's contents are
    the same object (writes happen in place), so they are looked up once per storage.

    Args:
        storage (Storage): the buffer's storage.
        done_key (NestedKey or None): the done flags to read (``None``: none).
        owner (str): the unit's class name, for messages.
        known (tuple, optional): ``(contents, done flags)`` of the unit's last read.
        layout (str): the unit's ``layout``.
        is_init_key (NestedKey): the unit's ``is_init_key``.

    Returns:
        ``(view, known)``: the :class:`~torchrl_ext.data._episodes.Snapshot` and what the unit
        keeps for its next read.
    """
    view = _episodes.snapshot(storage, done_key, owner, known)
    if known is None or known[0] is not view.contents:
        check_collisions(view.contents, layout, is_init_key)
        known = (view.contents, view.flags)
    return view, known


def split_anchors(
    index: torch.Tensor | tuple, ndim: int
) -> tuple[torch.Tensor, tuple[torch.Tensor, ...], torch.Tensor]:
    """Returns anchor time coordinates, lane coordinates and the anchors as one tensor.

    Args:
        index (torch.Tensor or tuple of torch.Tensor): the anchors, as ``Sequence.expand``
            takes them.
        ndim (int): the storage's number of dims.

    Raises:
        ValueError: if the anchors do not have one coordinate per storage dim.
        TypeError: if a coordinate is not an integer tensor.
    """
    if isinstance(index, tuple):
        coords = tuple(torch.as_tensor(c).reshape(-1) for c in index)
    else:
        index = torch.as_tensor(index)
        if ndim > 1 and index.ndim == 2 and index.shape[-1] == ndim:
            coords = tuple(index.unbind(-1))
        else:
            coords = (index.reshape(-1),)
    if len(coords) != ndim:
        raise ValueError(
            f"anchors must have one coordinate per storage dim ({ndim}), got {len(coords)}."
        )
    for coord in coords:
        if coord.is_floating_point() or coord.is_complex() or coord.dtype is torch.bool:
            raise TypeError(
                f"anchors must be integer storage indices, got index of dtype {coord.dtype}."
            )
    coords = tuple(c.long() for c in coords)
    anchors = torch.stack(coords, -1) if ndim > 1 else coords[0]
    return coords[0], coords[1:], anchors


def check_anchors(
    time: torch.Tensor, lanes: tuple[torch.Tensor, ...], view: _episodes.Snapshot
) -> None:
    """Raises ``IndexError`` unless every anchor addresses a written record.

    Args:
        time (torch.Tensor): the anchors' time coordinates ``[B]``.
        lanes (tuple of torch.Tensor): their lane coordinates ``[B]``, one per lane dim.
        view (Snapshot): what the sample reads from the storage.
    """
    if not time.numel():
        return
    sizes = (view.written, *view.lanes)
    names = ("time", *(f"lane {d}" for d in range(len(lanes))))
    for name, coord, size in zip(names, (time, *lanes), sizes, strict=True):
        low, high = (int(v) for v in torch.aminmax(coord))
        if low < 0 or high >= size:
            bad = low if low < 0 else high
            raise IndexError(
                f"anchor {name} coordinate {bad} is out of range: the storage holds {size} "
                f"written {'steps' if name == 'time' else 'lanes'} (valid coordinates 0 .. "
                f"{size - 1}). Anchors must come from the buffer's sampler or address written "
                "records."
            )


def check_collisions(contents: Any, layout: str, is_init_key: NestedKey) -> None:
    """Refuses stored entries that the sample's per-record info would overwrite.

    TensorDict buffers write every info entry into the sample, so a stored entry under one
    of those keys would silently be replaced. The one exception is a stored reset flag
    under ``is_init_key`` (one bool per record, as collectors and envs write it): the
    window's flags supersede it by design, since a recurrent module must also reset where
    each window starts.

    Args:
        contents (TensorDictBase): the storage's contents.
        layout (str): the unit's ``layout``.
        is_init_key (NestedKey): the unit's ``is_init_key``.

    Raises:
        ValueError: if a stored entry would be overwritten.
    """
    stored = {_plain_key(k) for k in contents.keys(include_nested=True)}
    outputs = [(k, k) for k in RECORD_KEYS]
    if layout == "batch_time":
        outputs.append(("is_init_key", is_init_key))
    for role, key in outputs:
        key = _plain_key(key)
        if key in stored and not (role == "is_init_key" and _is_flag(contents, key)):
            raise ValueError(
                f"the storage holds an entry {key!r}, which every sample's {role!r} info "
                "entry would overwrite. Rename the stored entry"
                + (", or pass another is_init_key=." if role == "is_init_key" else ".")
            )


def _plain_key(key: NestedKey) -> NestedKey:
    """``("a",)`` and ``"a"`` name the same entry."""
    return key[0] if isinstance(key, tuple) and len(key) == 1 else key


def _is_flag(contents: Any, key: NestedKey) -> bool:
    """Whether a stored entry holds one bool per record (a reset flag)."""
    entry = contents.get(key)
    if not isinstance(entry, torch.Tensor) or entry.dtype is not torch.bool:
        return False
    shape = tuple(entry.shape)
    batch = tuple(contents.batch_size)
    return shape == batch or shape == (*batch, 1)
