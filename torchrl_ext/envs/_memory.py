"""Fresh output tensors whose first touch is cheap: large CPU buffers ask for huge pages.

A rollout hands out fresh ``[N, T]`` tensors (nothing may alias a later call's outputs), so every
call writes into newly mapped memory; with 4 KiB pages the kernel then spends about as long in
page faults as in the simulation. On Linux, large CPU buffers are advised ``MADV_HUGEPAGE``
before the first write (as PyTorch itself does under ``THP_MEM_ALLOC_ENABLE=1``): one fault per
2 MiB instead of 512. The advice changes no value and is skipped where the OS does not offer it.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable, Sequence

import torch

_HUGE_PAGE = 2 << 20
_MADV_HUGEPAGE = 14  # asm-generic/mman-common.h, the same on every Linux architecture


@functools.cache
def _madvise() -> Callable[[int, int, int], int] | None:
    """The C library's ``madvise``, or ``None`` off Linux or where it cannot be loaded."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def _advise_huge_pages(tensor: torch.Tensor) -> None:
    """Advise huge pages for the whole 2 MiB pages inside ``tensor``'s memory (best effort)."""
    madvise = _madvise()
    if madvise is None:
        return
    start = tensor.data_ptr()
    first = -(-start // _HUGE_PAGE) * _HUGE_PAGE
    last = (start + tensor.numel() * tensor.element_size()) // _HUGE_PAGE * _HUGE_PAGE
    if last > first:
        madvise(first, last - first, _MADV_HUGEPAGE)  # a refusal only costs speed


def empty_output(
    shape: Sequence[int], dtype: torch.dtype, device: torch.device | str
) -> torch.Tensor:
    """``torch.empty(shape)``, advised to huge pages when it is a large CPU buffer.

    Args:
        shape (sequence of int): shape of the tensor.
        dtype (torch.dtype): its dtype.
        device (torch.device or str): its device.

    Returns:
        A fresh, uninitialized, contiguous tensor.

    Examples:
        >>> import torch
        >>> from torchrl_ext.envs._memory import empty_output
        >>> out = empty_output((1024, 1024), torch.float32, "cpu").fill_(1.0)
        >>> out.shape, bool(out.is_contiguous()), float(out.sum())
        (torch.Size([1024, 1024]), True, 1048576.0)
    """
    out = torch.empty(tuple(shape), dtype=dtype, device=device)
    if out.device.type == "cpu" and out.numel() * out.element_size() >= 2 * _HUGE_PAGE:
        _advise_huge_pages(out)
    return out


def empty_outputs(
    layouts: Sequence[tuple[Sequence[int], torch.dtype]], device: torch.device | str
) -> list[torch.Tensor]:
    """:func:`empty_output` for every ``(shape, dtype)`` of ``layouts``: all outputs of a call.

    Args:
        layouts (sequence of (shape, dtype)): shape and dtype of each tensor, in order.
        device (torch.device or str): the device of all of them.

    Returns:
        One fresh, uninitialized, contiguous tensor per layout, in order.

    Examples:
        >>> import torch
        >>> from torchrl_ext.envs._memory import empty_outputs
        >>> obs, done = empty_outputs([((4, 8, 3), torch.float32), ((4, 8, 1), torch.bool)], "cpu")
        >>> obs.shape, done.dtype
        (torch.Size([4, 8, 3]), torch.bool)
    """
    return [empty_output(shape, dtype, device) for shape, dtype in layouts]
