"""Recurrent PPO on CartPole without velocities, from stock TorchRL parts and torchrl_ext's.

    python examples/ppo_cartpole.py [--seeds 0 1 2] [--policy lstm|mlp] [--frames N] [--quick]

The agent sees the cart position and the pole angle only, so it must infer the velocities from
memory. The pipeline, top to bottom:

1. ``CartPoleEnv(observe_velocity=False)`` in a ``TransformedEnv`` with ``InitTracker``
   (``is_init``), ``StepCounter``, ``RewardSum``, a constant ``RewardScaling`` and
   ``ObservationNorm``, and the LSTMs' state primers.
2. An actor and a critic with separate LSTMs (as sb3-contrib's ``RecurrentPPO``): the critic's
   value error never shapes the actor's memory.
3. TorchRL's ``Collector`` gathers ``[num_envs, steps]`` batches and carries both LSTMs' states
   across batches.
4. ``RecurrentGAE`` recomputes the critic over whole rows, each from the critic state stored at
   collection time, and writes ``advantage`` and ``value_target``.
5. ``EnvMajorMinibatches`` hands out whole env rows, so the LSTMs replay each row from its stored
   state (resetting at ``is_init``), and TorchRL's ``ClipPPOLoss`` takes the gradient steps.

Learning rate and clip range decay linearly to zero; each network's gradient is clipped on its
own. Settings start from RL-Zoo's for CartPoleNoVel-v1 (reward scaling, per-network clipping,
observation factors and 16 envs x 32 steps x 8 epochs are the changes).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import runs
import torch
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.collectors import Collector
from torchrl.envs import (
    Compose,
    InitTracker,
    ObservationNorm,
    RewardScaling,
    RewardSum,
    StepCounter,
    TransformedEnv,
)
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import ProbabilisticActor, set_recurrent_mode
from torchrl.objectives import ClipPPOLoss

from torchrl_ext.data.minibatches import EnvMajorMinibatches
from torchrl_ext.envs import CartPoleEnv
from torchrl_ext.modules import LSTMModule
from torchrl_ext.objectives import RecurrentGAE


@dataclasses.dataclass
class Args:
    """The run's arguments: each field is an option (``--envs-per-minibatch 4``)."""

    seed: int = 0
    """seed of the envs, the network initialization and the minibatch order"""
    policy: Literal["lstm", "mlp"] = "lstm"
    """recurrent (lstm) or feed-forward (mlp) actor and critic"""
    frames: int = 61_440
    """frames to collect; learning rate and clip range decay to zero over them"""
    num_envs: int = 16
    """parallel envs"""
    steps: int = 32
    """steps per env per batch (the row length)"""
    hidden: int = 64
    """LSTM hidden size (or first MLP layer width)"""
    head: int = 64
    """width of the hidden layer of the actor and critic heads"""
    lr: float = 1.5e-3
    """initial Adam learning rate"""
    gamma: float = 0.98
    """discount"""
    lmbda: float = 0.8
    """GAE lambda"""
    epochs: int = 8
    """passes over each batch"""
    envs_per_minibatch: int = 8
    """env rows per minibatch"""
    clip: float = 0.2
    """initial PPO clip range"""
    entropy_coeff: float = 0.0
    """entropy bonus weight"""
    critic_coeff: float = 0.5
    """value-loss weight"""
    max_grad_norm: float = 0.5
    """gradient-norm clip, per network"""
    obs_scale: tuple[float, float] = (2.0, 20.0)
    """factors on cart position and pole angle (a constant VecNormalize)"""
    reward_scale: float = 0.1
    """factor on the reward the learner sees (returns are logged unscaled)"""
    target: float = 475.0
    """mean return that counts as solved"""
    return_window: int = 20
    """completed episodes averaged into the mean return"""
    eval_episodes: int = 16
    """episodes of the final deterministic evaluation"""

    def __post_init__(self) -> None:
        counts = ["frames", "num_envs", "steps", "hidden", "head", "epochs"]
        counts += ["envs_per_minibatch", "return_window", "eval_episodes"]
        runs.check_fields(
            self,
            counts=counts,
            positive=["lr", "clip", "max_grad_norm", "reward_scale"],
            non_negative=["entropy_coeff", "critic_coeff"],
            fractions=["gamma", "lmbda"],
        )
        self.obs_scale = tuple(self.obs_scale)
        if not all(math.isfinite(s) and s > 0 for s in self.obs_scale):
            raise ValueError(f"obs_scale must be finite and > 0, got obs_scale={self.obs_scale}.")
        if not math.isfinite(self.target):
            raise ValueError(f"target must be a finite number, got target={self.target!r}.")
        if self.frames < self.num_envs * self.steps:
            raise ValueError(
                f"frames must be at least one batch (num_envs * steps = "
                f"{self.num_envs * self.steps}), got frames={self.frames}."
            )
        if self.envs_per_minibatch > self.num_envs:
            raise ValueError(
                f"envs_per_minibatch must be <= num_envs = {self.num_envs}, got "
                f"envs_per_minibatch={self.envs_per_minibatch}."
            )


#: What ``--quick`` changes: three batches, fewer epochs and evaluation episodes.
QUICK = dict(frames=3 * 16 * 32, epochs=2, eval_episodes=4)

ACTOR_STATE = ("rs_actor_h", "rs_actor_c")
CRITIC_STATE = ("rs_critic_h", "rs_critic_c")


# ---------------------------------------------------------------------------- env and agent
def make_env(args: Args, num_envs: int, seed: int, primers: list, device) -> TransformedEnv:
    """Partially observable CartPole with episode tracking, fixed scaling and state primers."""
    base = CartPoleEnv(num_envs, seed=seed, observe_velocity=False, device=device)
    transforms = [
        InitTracker(),
        StepCounter(),
        RewardSum(),  # before the scaling: episode returns stay in CartPole's units
        RewardScaling(loc=0.0, scale=args.reward_scale),
        ObservationNorm(
            loc=torch.zeros(2), scale=torch.tensor(args.obs_scale), in_keys=["observation"]
        ),
    ]
    transforms += [m.make_tensordict_primer() for m in primers if isinstance(m, LSTMModule)]
    return TransformedEnv(base, Compose(*transforms).to(device))


def make_memory(args: Args, out_key: str, state: tuple[str, str]) -> TensorDictModule:
    """The recurrent (or feed-forward) trunk that reads ``observation`` into ``out_key``."""
    if args.policy == "lstm":
        return LSTMModule(
            input_size=2,
            hidden_size=args.hidden,
            in_keys=["observation", *state],
            out_keys=[out_key, *(("next", k) for k in state)],
        )
    mlp = nn.Sequential(nn.Linear(2, args.hidden), nn.ReLU())
    return TensorDictModule(mlp, in_keys=["observation"], out_keys=[out_key])


def make_head(args: Args, out_features: int, in_key: str, out_key: str) -> TensorDictModule:
    """One hidden ReLU layer of width ``args.head``, then a linear output."""
    net = nn.Sequential(
        nn.Linear(args.hidden, args.head), nn.ReLU(), nn.Linear(args.head, out_features)
    )
    return TensorDictModule(net, in_keys=[in_key], out_keys=[out_key])


def make_agent(args: Args) -> tuple[ProbabilisticActor, TensorDictSequential]:
    """Actor (categorical over the two pushes) and critic, each with its own memory."""
    actor = ProbabilisticActor(
        TensorDictSequential(
            make_memory(args, "actor_embed", ACTOR_STATE),
            make_head(args, 2, "actor_embed", "logits"),
        ),
        in_keys=["logits"],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )
    critic = TensorDictSequential(
        make_memory(args, "critic_embed", CRITIC_STATE),
        make_head(args, 1, "critic_embed", "state_value"),
    )
    return actor, critic


def memories(actor: ProbabilisticActor, critic: TensorDictSequential) -> list:
    """The trunks of actor and critic, whose primers the env needs."""
    return [actor.module[0][0], critic[0]]


def collection_policy(actor: ProbabilisticActor, critic: TensorDictSequential):
    """The actor, then the critic's LSTM: collection stores the critic state GAE replays from."""
    if isinstance(critic[0], LSTMModule):
        return TensorDictSequential(actor, critic[0])
    return actor


# ---------------------------------------------------------------------------- learning
def make_loss(args: Args, actor, critic) -> ClipPPOLoss:
    """ClipPPOLoss with RecurrentGAE as its value estimator, critic replayed from stored states.

    ``functional=False``: PPO has no target networks, and TorchRL's functional default swaps the
    parameters in and out around every call, for the same numbers.
    """
    loss = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=args.clip,
        entropy_bonus=args.entropy_coeff > 0,
        entropy_coeff=args.entropy_coeff if args.entropy_coeff > 0 else None,
        critic_coeff=args.critic_coeff,
        loss_critic_type="l2",
        normalize_advantage=True,
        functional=False,
    )
    gae = RecurrentGAE(args.gamma, args.lmbda, value_network=critic, initial_state="stored")
    loss.make_value_estimator(gae)
    return loss


def make_optimizer(args: Args, loss: ClipPPOLoss) -> torch.optim.Optimizer:
    """Adam with one parameter group per network, so each network's gradient is clipped alone.

    Clipping both together lets the critic's large early value errors shrink the actor's step.
    ``foreach=True`` gives the per-parameter loop's numbers on the CPU, in less time.
    """
    groups = [
        {"params": list(loss.actor_network.parameters())},
        {"params": list(loss.critic_network.parameters())},
    ]
    return torch.optim.Adam(groups, lr=args.lr, eps=1e-5, foreach=True)


def anneal(args: Args, loss: ClipPPOLoss, optim, frames: int) -> float:
    """Sets learning rate and clip range on their linear schedules; returns the fraction left."""
    left = max(0.0, 1.0 - frames / args.frames)
    for group in optim.param_groups:
        group["lr"] = args.lr * left
    loss.clip_epsilon.fill_(args.clip * left)
    return left


def loss_inputs(batch, loss: ClipPPOLoss):
    """The entries the loss reads: cutting minibatches from these costs less, same numbers."""
    keys = loss.tensor_keys
    selected = [*loss.actor_network.in_keys, *loss.critic_network.in_keys]
    selected += [keys.action, keys.sample_log_prob, keys.advantage, keys.value_target]
    return batch.select(*selected)


def update(args: Args, batch, loss: ClipPPOLoss, optim, generator) -> dict[str, float]:
    """PPO epochs over env-major minibatches of whole rows.

    Returns the last minibatch's losses and ``first_max_ratio``, the largest probability ratio
    on the first minibatch before any step: 1 when the actor, replaying each row from its stored
    state, reproduces the collection-time log-probabilities.
    """
    minibatches = EnvMajorMinibatches(
        loss_inputs(batch, loss), args.envs_per_minibatch, epochs=args.epochs, generator=generator
    )
    first_max_ratio = None
    for minibatch in minibatches:
        with set_recurrent_mode(True):
            out = loss(minibatch)
        if first_max_ratio is None:
            first_max_ratio = float(out["max_ratio"])
        total = out["loss_objective"] + out["loss_critic"]
        if "loss_entropy" in out.keys():
            total = total + out["loss_entropy"]
        optim.zero_grad(set_to_none=True)
        total.backward()
        for group in optim.param_groups:
            torch.nn.utils.clip_grad_norm_(group["params"], args.max_grad_norm)
        optim.step()
    losses = {k: float(v.detach().mean()) for k, v in out.items() if k.startswith("loss_")}
    return {**losses, "first_max_ratio": first_max_ratio}


def evaluate(args: Args, actor, primers: list, device) -> float:
    """Mean return of fresh episodes (one per env, ``eval_episodes`` envs) with mode actions."""
    env = make_env(args, args.eval_episodes, args.seed + 1_000_003, primers, device)
    returns = torch.full((args.eval_episodes,), math.nan, device=device)
    td = env.reset()
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        while bool(returns.isnan().any()):
            td, next_root = env.step_and_maybe_reset(actor(td))
            ended = td["next", "done"].squeeze(-1) & returns.isnan()
            returns[ended] = td["next", "episode_reward"].squeeze(-1)[ended]
            td = next_root
    env.close()
    return float(returns.mean())


def check_batch(args: Args, batch, first: bool) -> None:
    """Asserts the shapes and masks a recurrent PPO update relies on (``--quick``)."""
    n, t = args.num_envs, args.steps
    assert batch.batch_size == (n, t), batch.batch_size
    for key in ("advantage", "value_target", "state_value"):
        assert batch[key].shape == (n, t, 1), (key, batch[key].shape)
        assert bool(torch.isfinite(batch[key]).all()), key
    is_init = batch["is_init"].squeeze(-1)
    assert torch.equal(is_init, batch["step_count"].squeeze(-1) == 0), "is_init: episode starts"
    assert torch.equal(is_init[:, 1:], batch["next", "done"].squeeze(-1)[:, :-1])
    assert not first or bool(is_init[:, 0].all()), "every env starts an episode"
    if args.policy == "lstm":
        for key in (*ACTOR_STATE, *CRITIC_STATE):
            assert batch[key].shape == (n, t, 1, args.hidden), (key, batch[key].shape)
            assert bool((batch[key][is_init] == 0).all()), f"{key} must be zero at is_init"


# ---------------------------------------------------------------------------- training
def train(args: Args, run: runs.Run) -> runs.Result:
    """Trains, evaluates and logs one run (torch's global generator seeded by the caller)."""
    device = torch.device(run.device)
    watch = runs.Stopwatch()
    actor, critic = make_agent(args)
    actor, critic = actor.to(device), critic.to(device)
    primers = memories(actor, critic)
    env = make_env(args, args.num_envs, args.seed, primers, device)
    loss = make_loss(args, actor, critic)
    optim = make_optimizer(args, loss)
    collector = Collector(
        env,
        collection_policy(actor, critic),
        frames_per_batch=args.num_envs * args.steps,
        total_frames=-1,
        device=device,
    )
    generator = torch.Generator().manual_seed(args.seed)  # the minibatch order
    recorder = runs.Recorder(run, args, curve=[])
    if run.resume:
        runs.load_training_state(recorder.state, loss, optim, env, collector)
        generator.set_state(recorder.state["generator"])
    window = runs.ReturnWindow(args.return_window, args.target, recorder.counters)
    curve = recorder.counters["curve"]

    def state() -> dict:
        return {
            **runs.training_state(loss, optim, env, collector),
            "generator": generator.get_state(),
        }

    batches = iter(collector)
    while recorder.frames < args.frames:
        with watch("collect"):
            batch = next(batches)
        with watch("gae"):
            loss.value_estimator(batch)
        if run.quick:
            check_batch(args, batch, first=recorder.frames == 0)
        frames = recorder.frames + batch.numel()
        left = anneal(args, loss, optim, recorder.frames)
        with watch("update"):
            losses = update(args, batch, loss, optim, generator)
        if run.quick:
            assert all(math.isfinite(v) for v in losses.values()), losses
            assert abs(losses["first_max_ratio"] - 1.0) < 1e-3, "stored states must replay"
        done = batch["next", "done"].squeeze(-1)
        returns = batch["next", "episode_reward"].squeeze(-1)[done].tolist()
        mean_return = window.update(returns, frames, recorder.elapsed)
        curve.append((frames, mean_return))
        row = {"mean_return": mean_return, "best_mean_return": runs.best_mean(curve)}
        row.update(episodes=len(recorder.counters["recent"]), lr=args.lr * left, **losses)
        recorder.log(frames, row, state)
    result = recorder.finish(
        state,
        curve,
        final_eval=evaluate(args, actor, primers, device),
        title="PPO on CartPole without velocities",
        label=args.policy,
        target=args.target,
        hit=window.hit,
        timings=watch,
    )
    collector.shutdown()
    return result


def load_policy(args: Args, state: dict, device) -> ProbabilisticActor:
    """The actor of a checkpoint: reads ``observation`` (and its LSTM state), writes ``action``."""
    actor, critic = make_agent(args)
    loss = make_loss(args, actor.to(device), critic.to(device))
    loss.load_state_dict(state["loss"])
    return actor


def acting_env(args: Args, num_envs: int, seed: int, device) -> TransformedEnv:
    """An env the loaded policy acts in: the training env's transforms and state primers."""
    return make_env(args, num_envs, seed, memories(*make_agent(args)), device)


if __name__ == "__main__":
    runs.main(Args, train, quick=QUICK)
