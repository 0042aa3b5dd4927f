"""R2D2's schedules over the frame budget: the per-env exploration rates and the learning rate.

Used by :mod:`~torchrl_ext.examples.r2d2_cartpole` (which re-exports both) and its distributed
and POPGym variants.
"""

from __future__ import annotations

from typing import Any

import torch


def epsilons(cfg: Any, frames: int) -> torch.Tensor:
    """Per-env exploration rates: a linear decay, floored by a per-env ladder.

    Examples:
        >>> from torchrl_ext.examples.r2d2_cartpole import Config
        >>> cfg = Config(num_envs=3, eps_end=0.0, eps_lanes=0.1)
        >>> [round(e, 4) for e in epsilons(cfg, frames=10**9).tolist()]
        [0.1, 0.01, 0.001]
    """
    decayed = 1.0 + min(1.0, frames / cfg.eps_frames) * (cfg.eps_end - 1.0)
    lanes = torch.arange(cfg.num_envs, dtype=torch.float64) / max(1, cfg.num_envs - 1)
    return (cfg.eps_lanes ** (1 + 2 * lanes)).clamp(min=decayed).float()


def learning_rate(cfg: Any, frames: int) -> float:
    """Constant, then a linear decay to ``lr_end`` over the last part of the frame budget.

    Examples:
        >>> from torchrl_ext.examples.r2d2_cartpole import Config
        >>> cfg = Config(frames=1000, lr=1.0, lr_end=0.0, lr_decay_start=0.5)
        >>> [learning_rate(cfg, f) for f in (0, 500, 750, 1000)]
        [1.0, 1.0, 0.5, 0.0]
    """
    start = cfg.lr_decay_start * cfg.frames
    fraction = min(1.0, max(0.0, (frames - start) / max(1.0, cfg.frames - start)))
    return cfg.lr + fraction * (cfg.lr_end - cfg.lr)
