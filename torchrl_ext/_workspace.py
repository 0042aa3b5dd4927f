"""CPU buffers that stay mapped between calls: :class:`Workspace`.

A large tensor allocated afresh is mapped page by page by the first write to it, once the
allocator has returned freed memory to the system (as glibc does with large blocks). On
machines where a page fault is costly, that can cost more than the computation that fills the
tensor. A workspace keeps its buffers and hands one out again only when no tensor uses it.
"""

from __future__ import annotations

import sys
import threading

import numpy as np
import torch

from torchrl_ext._checks import check_int

__all__ = ["Workspace"]


# the workspace's usual dtypes, looked up without parsing the dtype's name on every call
_NUMPY_DTYPES = {
    torch.float32: np.dtype(np.float32),
    torch.float64: np.dtype(np.float64),
    torch.bool: np.dtype(np.bool_),
}


class Workspace:
    """CPU buffers that stay mapped between calls, reused once no tensor holds them.

    Each buffer is a numpy array handed out through :func:`torch.from_numpy`, whose tensor
    (and every view of it, and every tensor autograd saved from it) keeps a reference to the
    array: an array referenced by nothing but the workspace is unused, and only then handed
    out again. Past ``limit`` buffers, the free one handed out longest ago goes first, so the
    workspace holds what the latest calls used. Copies and pickles of a workspace start empty.

    Args:
        limit (int, optional): the most buffers kept. Defaults to ``8``.

    Examples:
        >>> import torch
        >>> space = Workspace(limit=4)
        >>> x = space.empty((2, 3), torch.float32)
        >>> space.empty((2, 3), torch.float32).data_ptr() == x.data_ptr()  # x still holds it
        False
        >>> address = x.data_ptr()
        >>> del x
        >>> space.empty((2, 3), torch.float32).data_ptr() == address
        True
    """

    def __init__(self, limit: int = 8):
        self.limit = check_int("limit", limit, minimum=1)
        self._arrays: list[np.ndarray] = []  # least recently handed out first
        self._lock = threading.Lock()

    def empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """An uninitialized CPU tensor, backed by a free buffer of the workspace if one fits."""
        np_dtype = _NUMPY_DTYPES.get(dtype) or np.dtype(str(dtype).removeprefix("torch."))
        shape = tuple(shape)
        with self._lock:
            arrays = self._arrays
            for i in range(len(arrays)):
                if arrays[i].shape == shape and arrays[i].dtype == np_dtype and self._unused(i):
                    arrays.append(arrays.pop(i))
                    return torch.from_numpy(arrays[-1])
            array = np.empty(shape, dtype=np_dtype)
            arrays.append(array)
            self._evict()
            return torch.from_numpy(array)

    def _evict(self) -> None:
        """Drops free buffers, oldest first, down to ``limit`` (the newest, when none is free)."""
        arrays = self._arrays
        while len(arrays) > self.limit:
            for i in range(len(arrays) - 1):
                if self._unused(i):
                    del arrays[i]
                    break
            else:
                arrays.pop()

    def _unused(self, i: int) -> bool:
        # the list's reference and getrefcount's own argument
        return sys.getrefcount(self._arrays[i]) == 2

    def __deepcopy__(self, memo: dict) -> Workspace:
        return Workspace(self.limit)

    def __getstate__(self) -> dict:
        return {"limit": self.limit}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["limit"])
