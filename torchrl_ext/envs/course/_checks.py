"""Checks of what a CourseGenerator is handed: seeds and epochs, masks, env ids, parameter values.

Each check raises a ``TypeError`` or ``ValueError`` naming the argument before anything is
written, and returns the value in the form the generator writes or launches with.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np
import torch
import warp as wp

from torchrl_ext._checks import check_int, check_tensor
from torchrl_ext.envs.course._kernels.courses import Params
from torchrl_ext.envs.course.config import _check_param

_PARAM_NAMES = tuple(Params.vars)


def as_int64(name: str, value: int | torch.Tensor) -> torch.Tensor:
    """An int, or an integer tensor, as a CPU int64 tensor of its shape."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() or value.is_complex() or value.dtype == torch.bool:
            raise TypeError(f"{name} must hold integers, got {name}.dtype={value.dtype}.")
        return value.detach().to("cpu", torch.int64)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int or an integer tensor, got {name}={value!r}.")
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"{name} must fit in int64, got {name}={value!r}.")
    return torch.tensor(value, dtype=torch.int64)


def int64_column(name: str, value: int | torch.Tensor, num_envs: int) -> torch.Tensor:
    """A CPU int64 ``[num_envs]`` column: an int for every env, or a tensor of one per env."""
    column = as_int64(name, value)
    if isinstance(value, torch.Tensor) and tuple(column.shape) != (num_envs,):
        raise ValueError(
            f"{name} must have shape ({num_envs},), got {name}.shape={tuple(value.shape)}."
        )
    return column.expand(num_envs)


def seed_column(seed: int | torch.Tensor, num_envs: int) -> np.ndarray:
    """Per-env seeds: ``seed + i`` for an int ``seed`` (wrapping around int64), else its entries."""
    column = int64_column("seed", seed, num_envs).numpy()
    if isinstance(seed, torch.Tensor):
        return column.copy()
    return np.arange(num_envs, dtype=np.int64) + column  # wraps around int64


def epoch_column(epochs: int | torch.Tensor, num_envs: int) -> torch.Tensor:
    """Per-env epochs in ``[0, 2**63 - 2]``: ``epochs`` for every env, or one per env."""
    column = int64_column("epochs", epochs, num_envs)
    if bool(((column < 0) | (column > 2**63 - 2)).any()):
        raise ValueError(
            f"epochs must be in [0, 2**63 - 2] (the next epoch must fit in int64), "
            f"got epochs={epochs!r}."
        )
    return column


def check_mask(
    mask: wp.array | torch.Tensor,
    num_envs: int,
    device: wp.context.Device,
    torch_device: torch.device,
) -> wp.array:
    """A regeneration mask, checked, as a Warp array sharing its memory (``check_mask``)."""
    if isinstance(mask, torch.Tensor):
        check_tensor("mask", mask, torch.int32, [(num_envs,)], torch_device)
        contiguous = mask.is_contiguous()
    elif isinstance(mask, wp.array):
        _check_warp_mask(mask, num_envs, device)
        contiguous = mask.is_contiguous
    else:
        raise TypeError(
            f"mask must be a wp.array or a torch.Tensor, got mask of type {type(mask).__name__}."
        )
    # checked before a tensor becomes a Warp array, which some layouts would crash
    if not contiguous:
        raise ValueError("mask must be contiguous, got a strided mask.")
    return wp.from_torch(mask, dtype=wp.int32) if isinstance(mask, torch.Tensor) else mask


def _check_warp_mask(mask: wp.array, num_envs: int, device: wp.context.Device) -> None:
    """:func:`~torchrl_ext._checks.check_tensor`'s dtype, shape and device checks, in Warp."""
    if mask.dtype != wp.int32:
        raise TypeError(f"mask must have dtype int32, got mask.dtype={mask.dtype.__name__}.")
    if mask.shape != (num_envs,):
        raise ValueError(f"mask must have shape {(num_envs,)}, got mask.shape={mask.shape}.")
    if str(mask.device) != str(device):
        raise ValueError(f"mask must be on {device}, got mask.device={mask.device}.")


def env_index(env_ids: torch.Tensor | Sequence[int] | None, num_envs: int) -> torch.Tensor | None:
    """``env_ids`` as a CPU int64 ``[k]`` tensor of distinct envs, or ``None`` for all."""
    if env_ids is None:
        return None
    if isinstance(env_ids, torch.Tensor):
        index = as_int64("env_ids", env_ids)
        if index.dim() > 1:
            raise ValueError(f"env_ids must be 0-d or 1-d, got env_ids.shape={tuple(index.shape)}.")
        index = index.reshape(-1)
    elif isinstance(env_ids, Sequence) and not isinstance(env_ids, str):
        try:
            ids = [check_int("env_ids", i) for i in env_ids]
        except TypeError:
            raise TypeError(
                f"env_ids must hold ints, got env_ids={env_ids!r}; pass env indices, e.g. [0, 2]."
            ) from None
        index = torch.tensor(ids, dtype=torch.int64).reshape(-1)
    else:
        raise TypeError(
            f"env_ids must be None, an integer tensor or a sequence of int, got "
            f"env_ids={env_ids!r}."
        )
    if bool(((index < 0) | (index >= num_envs)).any()):
        raise ValueError(f"env_ids must be in [0, {num_envs}), got env_ids={index.tolist()!r}.")
    if int(index.unique().numel()) != int(index.numel()):
        raise ValueError(f"env_ids must be distinct, got env_ids={index.tolist()!r}.")
    return index


def param_column(
    name: str, value: float | torch.Tensor, count: int, views: dict[str, torch.Tensor]
) -> torch.Tensor:
    """``value`` checked and converted to the ``[count]`` column written to ``param_<name>``.

    ``views`` are the generator's views; ``views["param_<name>"]`` gives the device and dtype.
    """
    if name not in _PARAM_NAMES:
        raise TypeError(
            f"unknown course parameter {name!r}; expected one of {sorted(_PARAM_NAMES)}."
        )
    if isinstance(value, bool) or (
        isinstance(value, torch.Tensor) and (value.dtype == torch.bool or value.is_complex())
    ):
        raise TypeError(f"{name} must be a real number or tensor, got {name}={value!r}.")
    if not isinstance(value, (numbers.Real, torch.Tensor)):
        raise TypeError(f"{name} must be a number or a tensor, got {name}={value!r}.")
    _check_param(name, value)
    target = views[f"param_{name}"]
    column = torch.as_tensor(value).detach().to(target.device, target.dtype)
    if column.dim() > 1 or column.numel() not in (1, count):
        raise ValueError(
            f"{name} must be a scalar or have shape ({count},) (one value per selected env), "
            f"got {name}.shape={tuple(column.shape)}."
        )
    return column.reshape(-1).expand(count)
