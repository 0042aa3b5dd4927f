"""Drop-in replay storages whose reads gather rows with ``index_select``.

A TensorDict replay buffer spends most of a sample reading the storage: torchrl's tensor
storages index every leaf with advanced indexing (``leaf[index]``), which on the CPU copies
element by element. For the flat tensor index every stock sampler and sample unit produces,
``index_select`` on dim 0 returns the same rows and copies each row as one block (measured on
the sequence-replay benchmark page, :doc:`/benchmarks/replay`). The storages here take that path
for a 1-D integer index and hand everything else (ranges, slices, tuples, multi-dimensional
storages, non-tensor leaves, named dims) to the stock read, so the data returned is identical in
every case: same values, dtypes, batch sizes and devices, never aliasing the storage.

Long CPU indices (a batch of sequence windows: thousands of rows in runs) go further: the leaves
with narrow rows are read in one pass by the prefetching kernel of
:mod:`torchrl_ext.data._kernels.gather`, which keeps many cache misses in flight and copies each
run of rows as one block. Which leaves it copies is worked out once per layout of the contents
(``_ReadPlan``) and checked, by identity, at every read.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from tensordict import TensorDict
from torchrl.data import LazyMemmapStorage, LazyTensorStorage

from torchrl_ext._compat import (
    new_tensordict_unchecked,
    storage_contents,
    tensordict_entries,
    tensordict_has_names,
)
from torchrl_ext.data._kernels import gather as _rows


class _Unsupported(Exception):
    """Raised while planning a read when an entry needs the stock read."""


class _ReadPlan:
    """How one TensorDict of the contents is read: each entry copied, selected or nested.

    ``entries`` holds ``(key, kind, value, spec)``: a leaf the kernel copies (``_COPY``, spec
    ``(trailing shape, dtype, row bytes)``), a leaf read by ``index_select`` (``_SELECT``), or
    a nested TensorDict (``_NESTED``, spec its own ``_ReadPlan``).
    """

    __slots__ = ("contents", "device", "entries", "tail")

    def __init__(self, contents: TensorDict) -> None:
        if type(contents) is not TensorDict or tensordict_has_names(contents):
            raise _Unsupported
        self.contents = contents
        self.tail = tuple(contents.batch_size[1:])
        self.device = contents.device
        self.entries = tuple(_entry(key, value) for key, value in contents.items())

    def matches(self, contents: Any) -> bool:
        """Whether ``contents`` still holds exactly the objects this plan was made of."""
        if contents is not self.contents or tensordict_has_names(contents):
            return False
        stored = tensordict_entries(contents)
        if len(stored) != len(self.entries):
            return False
        for key, kind, value, spec in self.entries:
            if stored.get(key) is not value or (kind == _NESTED and not spec.matches(value)):
                return False
        return True

    def read(self, index: torch.Tensor, rows: int, copies: list | None) -> TensorDict:
        """This plan's sample at ``index`` (all in ``[0, rows)``), nested batch dims kept.

        With a ``copies`` list, the leaves the kernel copies are allocated and appended to it
        (for :func:`~torchrl_ext.data._kernels.gather.copy_rows` to fill); with ``None``,
        every leaf is read by ``index_select``.
        """
        n = index.shape[0]
        out = {}
        for key, kind, value, spec in self.entries:
            if kind == _COPY and copies is not None:
                out[key] = torch.empty((n, *spec[0]), dtype=spec[1])
                copies.append((value, out[key], spec[2]))
            elif kind != _NESTED:
                written = value if value.shape[0] == rows else value.narrow(0, 0, rows)
                out[key] = written.index_select(0, index)
            else:
                out[key] = spec.read(index, rows, copies)
        return new_tensordict_unchecked(out, torch.Size([n, *self.tail]), self.device)


_COPY, _SELECT, _NESTED = 0, 1, 2  # compared with ==: a pickled plan holds copies

# the name pickled storages written by earlier versions give their cached plan
_Level = _ReadPlan


def _entry(key: str, value: Any) -> tuple:
    """``(key, kind, value, spec)`` of one entry of a ``_ReadPlan``."""
    if not isinstance(value, torch.Tensor):
        return key, _NESTED, value, _ReadPlan(value)
    if _rows.supports(value):
        row_bytes = math.prod(value.shape[1:]) * value.element_size()
        return key, _COPY, value, (tuple(value.shape[1:]), value.dtype, row_bytes)
    return key, _SELECT, value, None


def _read(plan: _ReadPlan, index: torch.Tensor, rows: int) -> TensorDict | None:
    """The sample at ``index`` read through ``plan``; ``None`` for an index out of range.

    Long indices (:func:`~torchrl_ext.data._kernels.gather.takes`) use the row kernel where it
    applies.
    """
    copies = [] if _rows.takes(index) else None
    out = plan.read(index, rows, copies)
    if copies and not _rows.copy_rows(index, rows, copies):
        return None
    return out


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
            and self.__dict__.get("_stock_read_contents") is not storage_contents(self)
        )
        if fast:
            try:
                rows = len(self)  # one lookup (a lock)
                out = _read(self._read_plan(), index, rows)
                if out is not None:
                    return out
            except _Unsupported:
                self._stock_read_contents = storage_contents(self)
            except (IndexError, RuntimeError):
                pass  # negative or out-of-range indices: the stock read's semantics and errors
        return super().get(index)

    def _read_plan(self) -> _ReadPlan:
        """How the contents are read, made once for each layout (raises ``_Unsupported``)."""
        plan = self.__dict__.get("_plan")
        contents = storage_contents(self)
        if plan is None or not plan.matches(contents):
            plan = self._plan = _ReadPlan(contents)
        return plan


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
