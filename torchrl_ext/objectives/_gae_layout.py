"""The views :class:`~torchrl_ext.objectives.RecurrentGAE` takes of its input: rows and keys.

GAE runs on canonical ``[N, T, *feature]`` rows (time second); these helpers move an input's
``[*batch, *feature]`` entries to that layout and back, and name the ``("next", ...)`` keys.
"""

from __future__ import annotations

import torch
from tensordict.utils import NestedKey


def next_key(key: NestedKey) -> tuple[str, ...]:
    """Returns ``("next", *key)``.

    Args:
        key (NestedKey): a key of the current step.
    """
    return ("next", *key) if isinstance(key, tuple) else ("next", key)


def flat_rows(x: torch.Tensor, batch_ndim: int, time_dim: int) -> torch.Tensor:
    """Views ``x`` (``[*batch, *feature]``) as ``[N, T, *feature]`` with time second.

    Args:
        x (torch.Tensor): an entry of the input, batch dims first.
        batch_ndim (int): the input's number of batch dims.
        time_dim (int): the time dim among them, ``>= 0``.
    """
    if batch_ndim == 2 and time_dim == 1:
        return x  # already [N, T, *feature] (the common case, kept free of view overhead)
    x = x.movedim(time_dim, batch_ndim - 1)
    return x.reshape(-1, *x.shape[batch_ndim - 1 :])


def unflat_rows(y: torch.Tensor, batch_shape: torch.Size, time_dim: int) -> torch.Tensor:
    """Inverse of :func:`flat_rows` for a tensor with features ``y.shape[2:]``.

    Args:
        y (torch.Tensor): ``[N, T, *feature]`` rows.
        batch_shape (torch.Size): the input's batch shape.
        time_dim (int): the time dim of ``batch_shape``, ``>= 0``.
    """
    batch_ndim = len(batch_shape)
    if batch_ndim == 2 and time_dim == 1:
        return y
    moved = [s for i, s in enumerate(batch_shape) if i != time_dim] + [batch_shape[time_dim]]
    return y.reshape(*moved, *y.shape[2:]).movedim(batch_ndim - 1, time_dim)


def per_step(flag: torch.Tensor) -> torch.Tensor:
    """``[N, T, *f]`` bool -> ``[N, T]``: whether any entry of the step is set (a view if one).

    Args:
        flag (torch.Tensor): bool rows ``[N, T, *f]``.
    """
    flat = flag.reshape(*flag.shape[:2], -1)
    return flat[..., 0] if flat.shape[-1] == 1 else flat.any(-1)


def to_channels(x: torch.Tensor, feature: torch.Size) -> torch.Tensor:
    """``[N, T, *f]`` -> ``[N, T, K]`` (broadcasting ``f`` to ``feature`` without copying).

    Args:
        x (torch.Tensor): rows ``[N, T, *f]`` whose ``f`` broadcasts to ``feature``.
        feature (torch.Size): the per-step shape of the reward.
    """
    if len(feature) == 1 and x.shape[2:] == feature:
        return x
    n_rows, steps = x.shape[:2]
    x = x.reshape(n_rows, steps, *([1] * (len(feature) - (x.ndim - 2))), *x.shape[2:])
    return x.expand(n_rows, steps, *feature).reshape(n_rows, steps, -1)
