"""``examples/ppo_cartpole.py``: its quick run, bitwise resume and the policy it saves."""

from __future__ import annotations

import pipelines
import ppo_cartpole
import pytest
import runs
import torch
from torchrl.collectors import Collector
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import set_recurrent_mode
from torchrl.objectives import ClipPPOLoss

from torchrl_ext.data import EnvMajorMinibatches


@pytest.mark.parametrize("policy", ["lstm", "mlp"])
def test_quick_run_checks_every_batch(tmp_path, policy):
    (result,) = pipelines.run("ppo_cartpole", "--quick", "--out", str(tmp_path), "--policy", policy)
    assert result.frames == ppo_cartpole.QUICK["frames"]
    logged = runs.read_scalars(tmp_path / "seed0")
    assert [step for step, _ in logged["mean_return"]] == [512, 1024, 1536]
    assert (tmp_path / "seed0" / "learning_curve.png").is_file()
    assert str(result).startswith(f"ppo_cartpole {policy} seed 0: ")


def test_resumes_bitwise(tmp_path, monkeypatch):
    pipelines.assert_resumes_bitwise(tmp_path, monkeypatch, "ppo_cartpole", 512, 1024)


def test_loaded_policy_acts_as_trained(tmp_path):
    pipelines.run("ppo_cartpole", "--quick", "--out", str(tmp_path))
    policy, args, module = runs.load_policy(tmp_path / "seed0")
    assert module is ppo_cartpole and args.policy == "lstm"
    env = ppo_cartpole.acting_env(args, 2, 7, "cpu")
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        rollout = env.rollout(5, policy)
    assert rollout["action"].shape[:2] == (2, 5)


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--lr", "0"], "lr must be a finite number > 0"),
        (["--gamma", "nan"], "gamma must be a finite number in"),
        (["--head", "0"], "head must be an integer >= 1"),
        (["--return-window", "0"], "return_window"),
        (["--reward-scale", "0"], "reward_scale"),
        (["--obs-scale", "0", "0"], "obs_scale"),
        (["--target", "nan"], "target"),
        (["--envs-per-minibatch", "32"], "envs_per_minibatch must be <= num_envs"),
        (["--frames", "10"], "frames must be at least one batch"),
        (["--policy", "gru"], "invalid choice"),
    ],
)
def test_refuses_bad_arguments_in_one_line(tmp_path, capsys, argv, match):
    pipelines.assert_refused("ppo_cartpole", argv, match, tmp_path, capsys)


# ---------------------------------------------------------------------------- the update
# The pipeline builds ClipPPOLoss with functional=False, Adam with foreach=True, and cuts its
# minibatches from the entries the loss reads, which is faster on the CPU. None of it may change
# what a run computes: checked against a plain loop over minibatches of the whole batch with
# TorchRL's default (functional) loss and Adam's default per-parameter loop.
def _defaults(args, actor, critic):
    """The demo's loss and optimizer as TorchRL's and torch's defaults build them."""
    loss = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=args.clip,
        entropy_bonus=False,
        critic_coeff=args.critic_coeff,
        loss_critic_type="l2",
        normalize_advantage=True,
    )
    groups = [
        {"params": list(loss.actor_network_params.values(True, True))},
        {"params": list(loss.critic_network_params.values(True, True))},
    ]
    return loss, torch.optim.Adam(groups, lr=args.lr, eps=1e-5)


def _plain_update(args, batch, loss, optim, generator):
    """The demo's epochs over whole-row minibatches, cut from the whole batch."""
    for minibatch in EnvMajorMinibatches(
        batch, args.envs_per_minibatch, epochs=args.epochs, generator=generator
    ):
        with set_recurrent_mode(True):
            out = loss(minibatch)
        optim.zero_grad()
        (out["loss_objective"] + out["loss_critic"]).backward()
        for group in optim.param_groups:
            torch.nn.utils.clip_grad_norm_(group["params"], args.max_grad_norm)
        optim.step()
    return {k: float(v.detach().mean()) for k, v in out.items() if k.startswith("loss_")}


def _pipeline(args, actor, critic):
    loss = ppo_cartpole.make_loss(args, actor, critic)
    return loss, ppo_cartpole.make_optimizer(args, loss)


def _trained(args, batch, build, update):
    """Parameters and losses after two updates on ``batch``, with ``build``'s loss and optim."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        actor, critic = ppo_cartpole.make_agent(args)
        loss, optim = build(args, actor, critic)
        losses = []
        for _ in range(2):
            stats = update(args, batch.clone(), loss, optim, torch.Generator().manual_seed(1))
            losses.append({k: v for k, v in stats.items() if k.startswith("loss_")})
    return [p.detach().clone() for p in (*actor.parameters(), *critic.parameters())], losses


@pytest.fixture(scope="module")
def collected():
    """A small demo's arguments and one collected batch with its advantages."""
    args = ppo_cartpole.Args(num_envs=4, steps=16, frames=256, epochs=2, envs_per_minibatch=2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        actor, critic = ppo_cartpole.make_agent(args)
        loss = ppo_cartpole.make_loss(args, actor, critic)
        env = ppo_cartpole.make_env(args, 4, 0, ppo_cartpole.memories(actor, critic), "cpu")
        policy = ppo_cartpole.collection_policy(actor, critic)
        collector = Collector(env, policy, frames_per_batch=64, total_frames=-1)
        batch = next(iter(collector))
        collector.shutdown()
        loss.value_estimator(batch)
    assert bool(batch["is_init"][:, 1:].any()), "the batch must hold episode starts"
    return args, batch


def test_optimizer_steps_every_weight_with_foreach(collected):
    args, _ = collected
    actor, critic = ppo_cartpole.make_agent(args)
    loss, optim = _pipeline(args, actor, critic)
    assert not loss.functional
    assert all(group["foreach"] for group in optim.param_groups)
    optimized = [p for group in optim.param_groups for p in group["params"]]
    assert optimized == [*actor.parameters(), *critic.parameters()]


def test_updates_equal_plain_loop_on_torchrl_defaults_bitwise(collected):
    args, batch = collected
    ours, our_losses = _trained(args, batch, _pipeline, ppo_cartpole.update)
    reference, reference_losses = _trained(args, batch, _defaults, _plain_update)
    assert our_losses == reference_losses
    assert len(ours) == len(reference) == 16
    for mine, theirs in zip(ours, reference, strict=True):
        assert torch.equal(mine, theirs)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        initial = [p.detach() for p in ppo_cartpole.make_agent(args)[0].parameters()]
    moved = zip(initial, ours[: len(initial)], strict=True)
    assert not any(torch.equal(a, b) for a, b in moved)  # the updates changed every weight
