"""CPU buffers that stay mapped between calls: :class:`Workspace`.

A large tensor allocated afresh is mapped page by page by the first write to it, once the
allocator has returned freed memory to the system (as glibc does with large blocks). On
machines where a page fault is costly, that can cost more than the computation that fills the
tensor. A workspace keeps its buffers and hands one out again only when no tensor uses it.
"""

from __future__ import annotations

import sys

import numpy as np
import torch

__all__ = ["Workspace"]


# the workspace's usual dtypes, looked up without parsing the dtype's name on every call
_NUMPY_DTYPES = {
    torch.float32: np.dtype(np.float32),
    torch.float64: np.dtype(np.float64),
    torch.bool: np.dtype(np.bool_),
}


class Workspace:
    """CPU output buffers that stay mapped between calls, reused once no tensor holds them.

    Each buffer is a numpy array handed out through :func:`torch.from_numpy`, whose tensor
    (and every view of it) keeps a reference to the array: an array referenced by nothing but
    the workspace is unused, and only then handed out again. Free buffers of other shapes
    are dropped, so the workspace holds what the latest calls returned.
    """

    #: Most buffers kept (a call takes three).
    LIMIT = 8

    def __init__(self):
        self._arrays: list[np.ndarray] = []

    def empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """An uninitialized CPU tensor, backed by a free buffer of the workspace if one fits."""
        np_dtype = _NUMPY_DTYPES.get(dtype) or np.dtype(str(dtype).removeprefix("torch."))
        shape = tuple(shape)
        arrays = self._arrays
        for i in range(len(arrays)):
            if arrays[i].shape == shape and arrays[i].dtype == np_dtype and self._unused(i):
                return torch.from_numpy(arrays[i])
        for i in reversed(range(len(arrays))):  # free buffers of another shape: the caller moved on
            if self._unused(i):
                del arrays[i]
        array = np.empty(shape, dtype=np_dtype)
        if len(arrays) < self.LIMIT:
            arrays.append(array)
        return torch.from_numpy(array)

    def _unused(self, i: int) -> bool:
        # the list's reference and getrefcount's own argument
        return sys.getrefcount(self._arrays[i]) == 2
