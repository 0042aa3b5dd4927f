"""The constructor arguments every WarpEnv takes, checked: device, seed and float dtype."""

from __future__ import annotations

from typing import Any

import torch
import warp as wp

from torchrl_ext._checks import check_float_dtype as _check_float_dtype
from torchrl_ext._checks import check_optional_int

_MAX_SEED = 2**64
FLOAT_DTYPES = (torch.float32, torch.float64)


def check_seed(seed: Any) -> int | None:
    """``seed`` as an int in ``[0, 2**64)``, or ``None`` (draw one)."""
    return check_optional_int("seed", seed, minimum=0, maximum=_MAX_SEED - 1)


def check_device(device: Any) -> torch.device:
    """``device`` as a torch device: ``"cpu"`` (any index: there is one CPU) or ``"cuda:i"``."""
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device must name a torch device, got device={device!r}.") from err
    if device.type == "cuda":
        wp.init()
        if not torch.cuda.is_available() or not wp.is_cuda_available():
            raise ValueError(f"device={str(device)!r} needs CUDA, which torch or warp cannot see.")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    elif device.type == "cpu":
        device = torch.device("cpu")  # "cpu:0" is the CPU too; tensors there report "cpu"
    else:
        raise ValueError(f"device must be 'cpu' or 'cuda[:i]', got device={str(device)!r}.")
    return device


def check_float_dtype(dtype: Any) -> torch.dtype:
    """``dtype`` if it is ``torch.float32`` or ``torch.float64`` (the env's ``dtype``)."""
    return _check_float_dtype("dtype", dtype)
