"""The effective seed of a course's ``(seed, epoch)``: the kernels' 64-bit hash, on the host.

Epoch 0 is the seed itself; a later epoch is a SplitMix64 hash of the pair, the one that
:mod:`~torchrl_ext.envs.course._kernels.draws` computes for every course it draws.
"""

from __future__ import annotations

import numpy as np
import torch

from torchrl_ext.envs.course._checks import as_int64

__all__ = ["effective_seed"]

_MIX_1 = 0xBF58476D1CE4E5B9
_MIX_2 = 0x94D049BB133111EB
_GOLDEN = 0x9E3779B97F4A7C15


def _mix64(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_MIX_1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_MIX_2)
    return z ^ (z >> np.uint64(31))


def effective_seed(seed: int | torch.Tensor, epoch: int | torch.Tensor) -> int | torch.Tensor:
    """The seed that rebuilds the course of ``(seed, epoch)`` at epoch 0 in a fresh generator.

    Epoch 0 is the seed itself; a later epoch is a 64-bit counter-based hash of the pair (SplitMix64
    mixing), the same one the kernels use, so no two seeds alias however large they are.

    Args:
        seed (int or torch.Tensor): int64 seed(s).
        epoch (int or torch.Tensor): epoch(s) ``>= 0``, broadcast against ``seed``.

    Returns:
        An int for int inputs, else a CPU int64 tensor of the broadcast shape.

    Raises:
        TypeError: for a non-integer seed or epoch.
        ValueError: for a negative epoch or an int outside int64.

    Examples:
        >>> from torchrl_ext.envs.course import effective_seed
        >>> print(effective_seed(7, 0) == 7, effective_seed(7, 1) == effective_seed(7, 2))
        True False
    """
    seeds, epochs = torch.broadcast_tensors(as_int64("seed", seed), as_int64("epoch", epoch))
    if bool((epochs < 0).any()):
        raise ValueError(f"epoch must be >= 0, got epoch={epoch!r}.")
    bits = seeds.numpy().astype(np.uint64).reshape(-1)
    steps = epochs.numpy().astype(np.uint64).reshape(-1)
    hashed = _mix64(_mix64(bits) ^ (steps * np.uint64(_GOLDEN)))
    result = np.where(steps == 0, bits, hashed).astype(np.int64).reshape(seeds.shape)
    if isinstance(seed, int) and isinstance(epoch, int):
        return int(result)
    return torch.from_numpy(result)
