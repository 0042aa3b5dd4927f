"""The PPO pipelines' update: the numbers of TorchRL's defaults, bit for bit.

The pipelines build ``ClipPPOLoss`` with ``functional=False`` and Adam with ``foreach=True``, and
cut their minibatches from the entries the loss reads, which is faster on the CPU. None of it may
change what a run computes: checked against a plain loop over minibatches of the whole batch
with TorchRL's default (functional) loss and Adam's default per-parameter loop, from the same
weights on the same collected batch.
"""

from __future__ import annotations

import pytest
import torch
from torchrl.modules import set_recurrent_mode
from torchrl.objectives import ClipPPOLoss

from torchrl_ext.data import EnvMajorMinibatches
from torchrl_ext.examples import _common, _ppo, ppo_cartpole


def _defaults(cfg, actor, critic):
    """The demo's loss and optimizer as TorchRL's and torch's defaults build them."""
    loss = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=cfg.clip,
        entropy_bonus=False,
        critic_coeff=cfg.critic_coeff,
        loss_critic_type="l2",
        normalize_advantage=True,
    )
    groups = [
        {"params": list(loss.actor_network_params.values(True, True))},
        {"params": list(loss.critic_network_params.values(True, True))},
    ]
    return loss, torch.optim.Adam(groups, lr=cfg.lr, eps=1e-5)


def _plain_update(cfg, batch, loss, optim, generator):
    """The demo's epochs over whole-row minibatches, cut from the whole batch."""
    for minibatch in EnvMajorMinibatches(
        batch, cfg.envs_per_minibatch, epochs=cfg.epochs, generator=generator
    ):
        with set_recurrent_mode(True):
            out = loss(minibatch)
        stats = _ppo.ppo_step(out, optim, cfg.max_grad_norm)
    return stats


def _pipeline(cfg, actor, critic):
    loss = ppo_cartpole.make_loss(cfg, actor, critic)
    return loss, _ppo.ppo_optimizer(cfg, loss)


def _trained(cfg, batch, build, update, seed=0):
    """Parameters and losses after two updates on ``batch``, with ``build``'s loss and optim."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        actor, critic = ppo_cartpole.make_agent(cfg, obs_dim=2)
        loss, optim = build(cfg, actor, critic)
        losses = []
        for _ in range(2):
            stats = update(cfg, batch.clone(), loss, optim, torch.Generator().manual_seed(1))
            losses.append({k: v for k, v in stats.items() if k.startswith("loss_")})
    return [p.detach().clone() for p in (*actor.parameters(), *critic.parameters())], losses


@pytest.fixture(scope="module")
def setup():
    """The quick demo's config and one collected batch with its advantages."""
    cfg = ppo_cartpole.Config(
        seed=0, num_envs=4, steps=16, frames=256, epochs=2, envs_per_minibatch=2
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        actor, critic = ppo_cartpole.make_agent(cfg, obs_dim=2)
        loss = ppo_cartpole.make_loss(cfg, actor, critic)
        primers = ppo_cartpole.memories(actor, critic)
        env = ppo_cartpole.make_env(cfg, cfg.num_envs, 0, primers, "cpu")
        policy = ppo_cartpole.collection_policy(actor, critic)
        collector = _common.collector(env, policy, cfg, torch.device("cpu"))
        batch = next(iter(collector))
        collector.shutdown()
        loss.value_estimator(batch)
    assert bool(batch["is_init"][:, 1:].any()), "the batch must hold episode starts"
    return cfg, batch


def test_pipeline_loss_is_not_functional(setup):
    cfg, _ = setup
    actor, critic = ppo_cartpole.make_agent(cfg, obs_dim=2)
    loss, optim = _pipeline(cfg, actor, critic)
    assert not loss.functional
    assert all(group["foreach"] for group in optim.param_groups)
    optimized = [p for group in optim.param_groups for p in group["params"]]
    assert optimized == [*actor.parameters(), *critic.parameters()]


def test_updates_equal_plain_loop_on_torchrl_defaults_bitwise(setup):
    cfg, batch = setup
    ours, our_losses = _trained(cfg, batch, _pipeline, ppo_cartpole.update)
    reference, reference_losses = _trained(cfg, batch, _defaults, _plain_update)
    assert our_losses == reference_losses
    assert len(ours) == len(reference) == 16
    for mine, theirs in zip(ours, reference, strict=True):
        assert torch.equal(mine, theirs)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        initial = [p.detach() for p in ppo_cartpole.make_agent(cfg, obs_dim=2)[0].parameters()]
    moved = zip(initial, ours[: len(initial)], strict=True)
    assert not any(torch.equal(a, b) for a, b in moved)  # the updates changed every weight
