"""The PPO pieces the PPO pipelines share: the loss with RecurrentGAE, its optimizer and schedules.

* :func:`ppo_loss`: :class:`~torchrl.objectives.ClipPPOLoss` with
  :class:`~torchrl_ext.objectives.RecurrentGAE` as its value estimator.
* :func:`ppo_optimizer` and :func:`anneal`: Adam with a parameter group per network, and the
  linear decay of learning rate and clip range over the frame budget.
* :func:`gae_batches`, :func:`loss_inputs`, :func:`ppo_step` and :func:`ppo_total`: the
  collected batches with their advantages, the entries the loss reads, one clipped gradient step
  on the summed loss terms.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from tensordict import TensorDictBase
from torchrl.objectives import ClipPPOLoss

from torchrl_ext.examples._common import Stopwatch, gradient_step
from torchrl_ext.objectives import RecurrentGAE


def ppo_loss(
    cfg: Any, actor: Any, critic: Any, functional: bool = False, **gae_options: Any
) -> ClipPPOLoss:
    """ClipPPOLoss with :class:`~torchrl_ext.objectives.RecurrentGAE` as its value estimator.

    ``cfg`` gives ``clip``, ``entropy_coeff``, ``critic_coeff``, ``gamma`` and ``lmbda``;
    ``gae_options`` go to ``RecurrentGAE``. By default the loss calls the networks as they are
    (``functional=False``): PPO has no target networks, and swapping functional parameters in
    and out around every call (TorchRL's default, ``functional=True``) costs about a tenth of a
    gradient step at the demo's sizes, for the same numbers.
    """
    loss = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=cfg.clip,
        entropy_bonus=cfg.entropy_coeff > 0,
        entropy_coeff=cfg.entropy_coeff if cfg.entropy_coeff > 0 else None,
        critic_coeff=cfg.critic_coeff,
        loss_critic_type="l2",
        normalize_advantage=True,
        functional=functional,
    )
    gae = RecurrentGAE(cfg.gamma, cfg.lmbda, value_network=critic, **gae_options)
    loss.make_value_estimator(gae)
    return loss


def ppo_optimizer(cfg: Any, loss: ClipPPOLoss, foreach: bool = True) -> torch.optim.Optimizer:
    """Adam with one parameter group per network, so gradients are clipped per network.

    Clipping the two networks' gradients together (as sb3 does) lets the critic's large early
    value errors shrink the actor's step; sb3 avoids that with reward normalization. The
    multi-tensor update (``foreach=True``; torch's default ``None`` picks it on CUDA only) gives
    the same numbers as the per-parameter loop on the CPU, in less time.
    """
    groups = [{"params": _parameters(loss, "actor")}, {"params": _parameters(loss, "critic")}]
    return torch.optim.Adam(groups, lr=cfg.lr, eps=1e-5, foreach=foreach or None)


def _parameters(loss: ClipPPOLoss, network: str) -> list[torch.Tensor]:
    """What ``loss`` trains of its ``"actor"`` or ``"critic"`` network, functional or not."""
    if loss.functional:
        return list(getattr(loss, f"{network}_network_params").values(True, True))
    return list(getattr(loss, f"{network}_network").parameters())


def anneal(cfg: Any, loss: ClipPPOLoss, optim: torch.optim.Optimizer, frames: int) -> float:
    """Sets learning rate and clip range to their linear schedules; returns the fraction left."""
    left = max(0.0, 1.0 - frames / cfg.frames)
    for group in optim.param_groups:
        group["lr"] = cfg.lr * left
    loss.clip_epsilon.fill_(cfg.clip * left)
    return left


def loss_inputs(batch: TensorDictBase, *losses: ClipPPOLoss) -> TensorDictBase:
    """The entries of ``batch`` that ``losses`` read once the advantages are in.

    These are each loss's networks' inputs, action, log-probability, advantage and value
    target. A minibatch indexes every entry of what it is cut from, so cutting the minibatches
    from this selection (about a third of a collected batch's entries) costs less and gives the
    same losses.
    """
    selected = []
    for loss in losses:
        keys = loss.tensor_keys
        selected += [*loss.actor_network.in_keys, *loss.critic_network.in_keys]
        selected += [keys.action, keys.sample_log_prob, keys.advantage, keys.value_target]
    return batch.select(*selected)


def ppo_step(out: Any, optim: torch.optim.Optimizer, max_grad_norm: float) -> dict[str, float]:
    """One gradient step on the sum of the PPO losses in ``out``, clipped per parameter group.

    Returns the mean of each loss term.
    """
    gradient_step(ppo_total(out), optim, max_grad_norm)
    return {k: float(v.detach().mean()) for k, v in out.items() if k.startswith("loss_")}


def ppo_total(out: Any) -> torch.Tensor:
    """The sum of the PPO loss terms in ``out``: objective, critic and, if present, entropy."""
    total = out["loss_objective"] + out["loss_critic"]
    if "loss_entropy" in out.keys():
        total = total + out["loss_entropy"]
    return total


def gae_batches(
    collector: Any, loss: ClipPPOLoss, watch: Stopwatch, frames: int, total: int
) -> Iterator[TensorDictBase]:
    """The collector's batches from ``frames`` until ``total`` frames, with GAE's outputs.

    The loss's value estimator writes ``advantage`` and ``value_target`` into each batch; the
    collection and GAE times go to ``watch`` under ``"collect"`` and ``"gae"``.
    """
    batches = iter(collector)
    while frames < total:
        with watch("collect"):
            batch = next(batches)
        with watch("gae"):
            loss.value_estimator(batch)
        frames += batch.numel()
        yield batch
