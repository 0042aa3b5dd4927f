"""The learner of the distributed R2D2 example: the replay service and what trains on it.

:func:`make_replay` starts the prioritized replay service; ``_Learner`` holds the loss, the
optimizer and the target copies, and samples, trains and writes priorities back over the service.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.objectives import HardUpdate

from torchrl_ext.examples import _common
from torchrl_ext.examples import r2d2_cartpole as single
from torchrl_ext.examples._r2d2_layout import TIMEOUT
from torchrl_ext.objectives import R2D2Loss


def make_replay(cfg: single.Config) -> tuple[Any, Any]:
    """The example's sequence unit and a prioritized replay service with its hyperparameters."""
    from torchrl_ext.distributed import prioritized_ray_buffer

    unit = single.make_unit(cfg)
    rb = prioritized_ray_buffer(
        cfg.capacity,
        sample_unit=unit,
        alpha=cfg.alpha,
        beta=cfg.beta,
        batch_size=cfg.batch_size,
        remote_config={"num_cpus": 0},
    )
    return unit, rb


class _Learner:
    """The example's loss, optimizer and target copies over the replay service.

    :meth:`update` trains on one sample while the next is on its way (a
    :class:`~torchrl_ext.distributed.SamplePrefetcher`), and sends the sample's priorities
    from a background thread without waiting for them; other calls of the service queue
    behind those. Every wait on the service is bounded by ``TIMEOUT``.
    """

    def __init__(self, cfg: single.Config, qnet: nn.Module, device: torch.device) -> None:
        self.cfg, self.device = cfg, device
        self.loss_fn = R2D2Loss(
            qnet,
            burn_in=cfg.burn_in,
            n_step=cfg.n_step,
            gamma=cfg.gamma,
            value_rescaling=cfg.value_rescaling,
        )
        self.target_updater = HardUpdate(
            self.loss_fn, value_network_update_interval=cfg.target_period
        )
        params = self.loss_fn.value_network_params.values(True, True)
        self.optim = torch.optim.Adam(list(params), lr=cfg.lr, foreach=True)
        self.unit, self.rb = make_replay(cfg)
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="replay")
        self._samples: Any = None  # a SamplePrefetcher once the actors have written

    def update(self, frames: int) -> tuple[TensorDictBase, TensorDictBase]:
        """One gradient step at the learning rate for ``frames``; returns the sample and loss."""
        if self._samples is None:
            from torchrl_ext.distributed import SamplePrefetcher

            self._samples = SamplePrefetcher(self.rb, depth=1, timeout=TIMEOUT)
        sample = self._samples.sample().to(self.device)
        for group in self.optim.param_groups:
            group["lr"] = single.learning_rate(self.cfg, frames)
        out = self.loss_fn(sample)
        _common.gradient_step(out["loss"], self.optim, self.cfg.max_grad_norm)
        self.target_updater.step()
        self._pool.submit(self.unit.update_priority, self.rb, sample)
        return sample, out

    def call(self, method: str, *args: Any) -> Any:
        """Calls the replay service after the queued calls, waiting at most ``TIMEOUT``."""
        return self._pool.submit(getattr(self.rb, method), *args).result(timeout=TIMEOUT)

    def state_dict(self) -> dict[str, Any]:
        """Networks, optimizer and target-copy counter (the replay is saved by ``dumps``)."""
        return {
            "loss": self.loss_fn.state_dict(),
            "optim": self.optim.state_dict(),
            "target_updater": self.target_updater.counter,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned."""
        self.loss_fn.load_state_dict(state["loss"])
        self.optim.load_state_dict(state["optim"])
        self.target_updater.counter = state["target_updater"]

    def close(self) -> None:
        """Drops pending calls and closes the replay service."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.rb.close()
