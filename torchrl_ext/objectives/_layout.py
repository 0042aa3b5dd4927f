"""Moving rollout tensors between a TensorDict's layout and the canonical ``[N, T, ...]`` one."""

from __future__ import annotations

import torch
from tensordict.utils import NestedKey


def next_key(key: NestedKey) -> tuple[str, ...]:
    """Returns ``("next", *key)``."""
    return ("next", *key) if isinstance(key, tuple) else ("next", key)


def flat_rows(x: torch.Tensor, batch_ndim: int, time_dim: int) -> torch.Tensor:
    """Views ``x`` (``[*batch, *feature]``) as ``[N, T, *feature]`` with time second."""
    if batch_ndim == 2 and time_dim == 1:
        return x  # already [N, T, *feature] (the common case, kept free of view overhead)
    x = x.movedim(time_dim, batch_ndim - 1)
    return x.reshape(-1, *x.shape[batch_ndim - 1 :])


def unflat_rows(y: torch.Tensor, batch_shape: torch.Size, time_dim: int) -> torch.Tensor:
    """Inverse of :func:`flat_rows` for a tensor with features ``y.shape[2:]``."""
    batch_ndim = len(batch_shape)
    if batch_ndim == 2 and time_dim == 1:
        return y
    moved = [s for i, s in enumerate(batch_shape) if i != time_dim] + [batch_shape[time_dim]]
    return y.reshape(*moved, *y.shape[2:]).movedim(batch_ndim - 1, time_dim)
