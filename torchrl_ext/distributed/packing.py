"""A TensorDict as one flat byte array: how a replay service hands samples to a learner on Ray.

Ray pickles a returned TensorDict entry by entry, which costs far more than its bytes (a
sample of 64 windows of 24 steps, 16 entries and about 0.9 MB, takes several milliseconds).
A NumPy array above Ray's inline limit goes into the node's shared-memory object store
instead, and ``ray.get`` in a process on the same node maps it without copying.
:func:`pack_tensordict` turns a TensorDict into such an array plus a small schema;
:func:`unpack_tensordict` rebuilds it, equal in keys, dtypes, shapes, values, batch size and
device. :class:`PackedSampleReplayBuffer` is the replay buffer the Ray actor holds: its
:meth:`~PackedSampleReplayBuffer.sample_packed` samples as ``sample()`` does and returns the
packed form, which :meth:`ShareableRayReplayBuffer.sample
<torchrl_ext.distributed.ShareableRayReplayBuffer.sample>` unpacks. On the learner's node
the bytes skip the object store too: the service writes them into a shared-memory slot the
learner lends it (:mod:`~torchrl_ext.distributed.slots`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase, is_leaf_nontensor
from torchrl.data import TensorDictReplayBuffer

from torchrl_ext._checks import check_optional_int
from torchrl_ext.data.safe_loading import check_replay_folder
from torchrl_ext.distributed.slots import SlotWriter, check_slot

_ALIGN = 8  # every entry starts on an 8-byte boundary, so each view keeps its dtype's alignment
#: The bytes open with a digest of the schema, so that bytes and schema that travelled apart
#: (a slot and a reply) are checked to belong together before any entry is read.
_HEADER = 16


class PackedTensorDict(NamedTuple):
    """A TensorDict's tensors as one byte array, with what rebuilding it needs.

    Its fields: ``data``, the tensors' bytes one entry after another (a 1-d ``uint8`` NumPy
    array), or ``None`` in the reply of a service that wrote them into the learner's
    shared-memory slot (:mod:`~torchrl_ext.distributed.slots`); ``schema``, one
    ``(key, dtype, shape, offset)`` per tensor entry; ``batch_size`` and ``device``, the
    TensorDict's; ``rest``, the entries that are not tensors (non-tensor data) as a
    TensorDict, or ``None``. Build it with :func:`pack_tensordict`.
    """

    data: np.ndarray | None
    schema: tuple
    batch_size: torch.Size
    device: str | None
    rest: TensorDictBase | None


def pack_tensordict(td: TensorDictBase) -> PackedTensorDict:
    """Packs the tensors of ``td`` into one flat ``uint8`` NumPy array and a schema.

    Args:
        td (TensorDictBase): the TensorDict to pack; its tensors are read on the CPU.

    Returns:
        The packed TensorDict; :func:`unpack_tensordict` rebuilds ``td`` from it.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext.distributed import pack_tensordict, unpack_tensordict
        >>> td = TensorDict(
        ...     {"obs": torch.arange(6.0).view(3, 2), ("next", "done"): torch.ones(3, 1).bool()},
        ...     [3],
        ... )
        >>> packed = pack_tensordict(td)
        >>> packed.data.dtype, packed.data.shape, len(packed.schema)
        (dtype('uint8'), (48,), 2)
        >>> (unpack_tensordict(packed) == td).all()
        True
    """
    if not isinstance(td, TensorDictBase):
        raise TypeError(f"td must be a TensorDict, got td={type(td).__name__}.")
    return _pack(td, slot=None)


def _pack(td: TensorDictBase, slot: str | None) -> PackedTensorDict:
    """``td`` packed into ``slot`` (``data`` ``None``), else into a new array (``data``)."""
    flats, packed = _layout(td)
    nbytes = packed_nbytes(packed)
    data = None if slot is None else _SLOT_WRITER.map(slot, nbytes)
    if data is not None:
        _fill(data, flats, packed.schema)
        return packed
    data = np.zeros(nbytes, dtype=np.uint8)
    _fill(data, flats, packed.schema)
    return packed._replace(data=data)


def packed_nbytes(packed: PackedTensorDict) -> int:
    """Bytes that the tensors of ``packed`` take in its flat array, padding included."""
    if not packed.schema:
        return _HEADER
    _, dtype, shape, offset = packed.schema[-1]
    return offset + _padded(shape.numel() * dtype.itemsize)


def _padded(nbytes: int) -> int:
    """``nbytes`` rounded up to the next entry boundary."""
    return nbytes + (-nbytes % _ALIGN)


def _layout(td: TensorDictBase) -> tuple[list[torch.Tensor], PackedTensorDict]:
    """Each tensor entry's bytes (flat ``uint8`` CPU views), and the packed form without data."""
    others, flats, schema, offset = [], [], [], _HEADER
    for key, value in td.items(include_nested=True, leaves_only=True, is_leaf=is_leaf_nontensor):
        if not isinstance(value, torch.Tensor):
            others.append(key)
            continue
        flat = value.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
        schema.append((key, value.dtype, value.shape, offset))
        flats.append(flat)
        offset += _padded(flat.numel())
    rest = td.select(*others) if others else None
    device = None if td.device is None else str(td.device)
    return flats, PackedTensorDict(None, tuple(schema), td.batch_size, device, rest)


def _fill(data: np.ndarray, flats: list[torch.Tensor], schema: tuple) -> None:
    """Writes the schema's digest, then each entry's bytes at its offset (padding is left)."""
    data[:_HEADER] = np.frombuffer(_digest(schema), dtype=np.uint8)
    out = torch.from_numpy(data)
    for flat, (_, _, _, offset) in zip(flats, schema, strict=True):
        out[offset : offset + flat.numel()].copy_(flat)


def unpack_tensordict(packed: PackedTensorDict) -> TensorDict:
    """Rebuilds the TensorDict that :func:`pack_tensordict` packed.

    The bytes are copied once, into one storage per entry, so each tensor owns its memory
    (pickling one entry sends that entry only) and is writable even when ``packed.data`` is a
    read-only view of Ray's object store or of a shared-memory slot.

    Args:
        packed (PackedTensorDict): what :func:`pack_tensordict` returned.

    Returns:
        A TensorDict equal to the packed one: keys, dtypes, shapes, values, batch size, device.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext.distributed import pack_tensordict, unpack_tensordict
        >>> td = TensorDict({"a": torch.arange(4), "b": torch.ones(4, 3, dtype=torch.half)}, [4])
        >>> out = unpack_tensordict(pack_tensordict(td))
        >>> out["a"].tolist(), out["b"].dtype, out["b"].shape
        ([0, 1, 2, 3], torch.float16, torch.Size([4, 3]))
    """
    if not isinstance(packed, PackedTensorDict):
        raise TypeError(f"packed must be a PackedTensorDict, got packed={type(packed).__name__}.")
    if packed.data is None:
        raise ValueError("packed.data is None: the bytes are in a slot; read them in first.")
    _check_schema(packed)
    entries = {}
    for key, dtype, shape, offset in packed.schema:
        nbytes = shape.numel() * dtype.itemsize
        own = torch.from_numpy(packed.data[offset : offset + nbytes].copy())
        entries[key] = own.view(dtype).view(shape) if nbytes else torch.empty(shape, dtype=dtype)
    out = TensorDict(entries, packed.batch_size, device=packed.device)
    if packed.rest is not None:
        out.update(packed.rest)
    return out


def _digest(schema: tuple) -> bytes:
    """A digest of every entry's key, dtype, shape and offset, in order."""
    text = repr([(key, str(dtype), tuple(shape), offset) for key, dtype, shape, offset in schema])
    return hashlib.blake2b(text.encode(), digest_size=_HEADER).digest()


def _check_schema(packed: PackedTensorDict) -> None:
    """Raises unless ``packed.data`` was packed with ``packed.schema`` and holds all its bytes."""
    data, expected = packed.data, packed_nbytes(packed)
    if data.size < expected or data[:_HEADER].tobytes() != _digest(packed.schema):
        raise ValueError(
            "packed.schema does not describe packed.data (the schema's digest at the start of "
            f"the bytes differs, or the {data.size} bytes are fewer than the schema's "
            f"{expected}): unpack the schema and bytes of one pack_tensordict call."
        )


class PackedSampleReplayBuffer(TensorDictReplayBuffer):
    """The replay buffer a Ray replay service holds: ``sample()`` plus a packed sample.

    A ``TensorDictReplayBuffer`` in every way, with one more method,
    :meth:`sample_packed`, that Ray calls on the actor. TorchRL's ``RayReplayBuffer`` builds
    its actor from the class given as ``replay_buffer_cls``; subclassing that class is the way
    to give the actor a method of its own (its ``sample()`` must keep returning a
    TensorDict for TorchRL's clients). :func:`~torchrl_ext.distributed.prioritized_ray_buffer`
    serves this class.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import LazyTensorStorage
        >>> from torchrl_ext.distributed import PackedSampleReplayBuffer, unpack_tensordict
        >>> rb = PackedSampleReplayBuffer(storage=LazyTensorStorage(16), batch_size=4)
        >>> _ = rb.extend(TensorDict({"obs": torch.arange(16.0)}, [16]))
        >>> rb.set_rng(torch.Generator().manual_seed(0))
        >>> first = rb.sample()
        >>> rb.set_rng(torch.Generator().manual_seed(0))
        >>> (unpack_tensordict(rb.sample_packed()) == first).all()
        True
    """

    def loads(self, path: str | Path) -> None:
        """``TensorDictReplayBuffer.loads`` of a folder that holds data only.

        TorchRL's ``loads`` unpickles files of the folder; the folder is first checked by
        :func:`~torchrl_ext.data.safe_loading.check_replay_folder` in this process, the one that
        reads it (a Ray service's, on its own node).

        Raises:
            ValueError: if a file of ``path`` holds anything but tensors and plain data; the
                buffer is left as it was.
        """
        super().loads(check_replay_folder(path))

    def sample_packed(
        self, batch_size: int | None = None, slot: str | None = None
    ) -> PackedTensorDict:
        """Samples as ``sample(batch_size)`` does and returns the sample packed.

        Args:
            batch_size (int, optional): as for ``sample()``. Defaults to the buffer's.
            slot (str, optional): a learner's shared-memory slot
                (:class:`~torchrl_ext.distributed.slots.SlotPool`) to write the bytes into.
                Defaults to ``None``: the bytes travel in the reply.

        Returns:
            The sample, packed by :func:`pack_tensordict`. When the bytes went into
            ``slot``, ``data`` is ``None``; when this process cannot open ``slot`` (another
            node), they are in ``data`` as without a slot.
        """
        batch_size = check_optional_int("batch_size", batch_size, minimum=1)
        slot = None if slot is None else check_slot(slot)  # before the draw moves the sampler
        return _pack(self.sample(batch_size), slot)


#: The slots this process's replay service writes into (one service per Ray actor process).
_SLOT_WRITER = SlotWriter()


def _packing_supported(replay_buffer_cls: Any) -> bool:
    return isinstance(replay_buffer_cls, type) and issubclass(
        replay_buffer_cls, PackedSampleReplayBuffer
    )
