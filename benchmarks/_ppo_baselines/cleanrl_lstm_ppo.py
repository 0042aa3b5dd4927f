"""Recurrent PPO on CartPole without velocities, hand-written in one file (CleanRL style).

Written for this benchmark in the spirit of CleanRL's ``ppo_atari_lstm.py`` (not copied from it):
plain torch, the whole pipeline read top to bottom. It is the PPO demo
(``python examples/ppo_cartpole.py``) without torchrl or torchrl_ext's training parts:

* the same env object (:class:`~torchrl_ext.envs.CartPoleEnv`, stepped through
  :class:`.cartpole_adapter.BatchedCartPole`), the same observation and reward factors;
* separate LSTM trunks (``nn.LSTMCell``) for actor and critic with heads of one hidden ReLU
  layer, PyTorch's default initialization (as the demo's ``LSTMModule`` and ``nn.Linear``),
  created in the same order as the demo's modules;
* rollouts one step at a time, the LSTM state multiplied by ``1 - is_init`` (zero at episode
  starts), the state at each batch's start stored for the update;
* GAE as a plain backward loop, truncated episodes bootstrapping from the critic's value of
  their last observation (``terminated`` stops the bootstrap, ``done`` cuts the trace);
* 8 epochs of 2 minibatches of 8 whole env rows, each row replayed from its stored state with a
  Python loop over steps that resets the state at episode starts; clipped surrogate and
  ``0.5 * (v - target)^2`` with advantages standardized per minibatch; Adam with one parameter
  group per network, gradients clipped per network; learning rate and clip range linear to 0.

Where the demo and this loop differ: random numbers are drawn in another order (actions, then
minibatch permutations from their own generator), so runs with the same seed are not equal
step for step.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.distributions import Categorical

from _ppo_baselines.cartpole_adapter import BatchedCartPole


@dataclass
class Args:
    seed: int = 0
    """seed of the envs, the network initialization, the actions and the minibatch order"""
    total_frames: int = 61_440
    """frames collected in total; learning rate and clip range reach 0 there"""
    num_envs: int = 16
    """parallel envs (rows of a batch)"""
    num_steps: int = 32
    """steps per env per batch (the row length)"""
    learning_rate: float = 1.5e-3
    """Adam's initial learning rate"""
    adam_eps: float = 1e-5
    """Adam's epsilon"""
    gamma: float = 0.98
    """discount"""
    gae_lambda: float = 0.8
    """GAE lambda"""
    update_epochs: int = 8
    """passes over each batch"""
    envs_per_minibatch: int = 8
    """whole env rows per minibatch"""
    clip_coef: float = 0.2
    """initial PPO clip range"""
    vf_coef: float = 0.5
    """weight of the squared value error"""
    max_grad_norm: float = 0.5
    """gradient-norm clip, per network"""
    hidden: int = 64
    """LSTM hidden size (actor and critic each)"""
    head: int = 64
    """width of the hidden layer of each head"""
    obs_scale: tuple[float, float] = (2.0, 20.0)
    """factors on cart position and pole angle"""
    reward_scale: float = 0.1
    """factor on the reward the learner sees"""
    eval_episodes: int = 16
    """episodes of the final deterministic evaluation"""

    @property
    def batch_frames(self) -> int:
        return self.num_envs * self.num_steps


class RecurrentNet(nn.Module):
    """An LSTM cell over observations, then one hidden ReLU layer and a linear output.

    ``nn.LSTMCell`` has ``nn.LSTM``'s parameters (same shapes, order and initialization) and
    costs less per call, which is what a loop over steps pays for.
    """

    def __init__(self, obs_dim: int, hidden: int, head: int, out: int) -> None:
        super().__init__()
        self.lstm = nn.LSTMCell(obs_dim, hidden)
        self.head = nn.Sequential(nn.Linear(hidden, head), nn.ReLU(), nn.Linear(head, out))

    def initial_state(self, num_envs: int) -> tuple[torch.Tensor, torch.Tensor]:
        zeros = torch.zeros(num_envs, self.lstm.hidden_size)
        return zeros, zeros.clone()

    def step(self, obs, state, is_init):
        """One step for every env: ``obs [N, obs]``, ``is_init [N]``; returns output, state."""
        keep = (~is_init).float().unsqueeze(-1)
        state = self.lstm(obs, (state[0] * keep, state[1] * keep))
        return self.head(state[0]), state

    def unroll(self, obs, state, is_init):
        """Whole rows ``obs [N, T, obs]`` from ``state``, reset where ``is_init [N, T]``."""
        outputs = []
        for t in range(obs.shape[1]):
            keep = (~is_init[:, t]).float().unsqueeze(-1)
            state = self.lstm(obs[:, t], (state[0] * keep, state[1] * keep))
            outputs.append(state[0])
        return self.head(torch.stack(outputs, dim=1))


@dataclass
class Batch:
    """One collected ``[N, T]`` batch and the LSTM states at its start."""

    obs: torch.Tensor
    is_init: torch.Tensor
    actions: torch.Tensor
    log_probs: torch.Tensor
    values: torch.Tensor
    rewards: torch.Tensor
    terminated: torch.Tensor
    done: torch.Tensor
    bootstrap: torch.Tensor  # value of the last observation where truncated, else 0
    next_value: torch.Tensor  # value after the row's last step
    actor_state: tuple[torch.Tensor, torch.Tensor]
    critic_state: tuple[torch.Tensor, torch.Tensor]
    ended_returns: list[float]


@dataclass
class Timings:
    """Seconds per section over the whole run."""

    totals: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.totals[name] = self.totals.get(name, 0.0) + time.perf_counter() - start


class Rollout:
    """Steps the actor and critic with the env, carrying both LSTM states across batches."""

    def __init__(self, args: Args, env: BatchedCartPole, actor: RecurrentNet, critic: RecurrentNet):
        self.args, self.env, self.actor, self.critic = args, env, actor, critic
        self.obs = env.reset()
        self.is_init = torch.ones(args.num_envs, dtype=torch.bool)
        self.actor_state = actor.initial_state(args.num_envs)
        self.critic_state = critic.initial_state(args.num_envs)

    @torch.no_grad()
    def collect(self) -> Batch:
        n, t_max = self.args.num_envs, self.args.num_steps
        rows = {k: [] for k in ("obs", "is_init", "actions", "log_probs", "values", "rewards",
                                "terminated", "done", "bootstrap")}  # fmt: skip
        actor_state0, critic_state0, ended = self.actor_state, self.critic_state, []
        for _ in range(t_max):
            logits, self.actor_state = self.actor.step(self.obs, self.actor_state, self.is_init)
            value, self.critic_state = self.critic.step(self.obs, self.critic_state, self.is_init)
            dist = Categorical(logits=logits)
            action = dist.sample()
            step = self.env.step(action)
            bootstrap = torch.zeros(n)
            if bool(step.truncated.any()):  # the episode goes on past the limit: bootstrap
                continuing = torch.zeros_like(step.done)  # the final obs continues its episode
                final_value, _ = self.critic.step(step.final_obs, self.critic_state, continuing)
                bootstrap = torch.where(step.truncated & ~step.terminated, final_value[:, 0], 0.0)
            for key, value_t in (("obs", self.obs), ("is_init", self.is_init),
                                 ("actions", action), ("log_probs", dist.log_prob(action)),
                                 ("values", value[:, 0]), ("rewards", step.reward),
                                 ("terminated", step.terminated), ("done", step.done),
                                 ("bootstrap", bootstrap)):  # fmt: skip
                rows[key].append(value_t)
            ended += step.ended_returns.tolist()
            self.obs, self.is_init = step.obs, step.done
        next_value, _ = self.critic.step(self.obs, self.critic_state, self.is_init)
        stacked = {k: torch.stack(v, dim=1) for k, v in rows.items()}
        return Batch(**stacked, next_value=next_value[:, 0], actor_state=actor_state0,
                     critic_state=critic_state0, ended_returns=ended)  # fmt: skip


def gae(batch: Batch, gamma: float, lmbda: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and value targets ``[N, T]``, a plain loop backwards in time."""
    values, t_max = batch.values, batch.values.shape[1]
    advantages = torch.zeros_like(values)
    last = torch.zeros_like(values[:, 0])
    for t in reversed(range(t_max)):
        following = batch.next_value if t == t_max - 1 else values[:, t + 1]
        next_value = torch.where(batch.done[:, t], batch.bootstrap[:, t], following)
        not_terminated = (~batch.terminated[:, t]).float()
        delta = batch.rewards[:, t] + gamma * not_terminated * next_value - values[:, t]
        last = delta + gamma * lmbda * (~batch.done[:, t]).float() * last
        advantages[:, t] = last
    return advantages, advantages + values


def ppo_losses(args, actor, critic, batch, advantages, targets, envs, clip):
    """Clipped surrogate and value loss on the whole rows ``envs`` of ``batch``."""
    state = lambda s: (s[0][envs], s[1][envs])  # noqa: E731
    logits = actor.unroll(batch.obs[envs], state(batch.actor_state), batch.is_init[envs])
    values = critic.unroll(batch.obs[envs], state(batch.critic_state), batch.is_init[envs])
    log_prob = Categorical(logits=logits).log_prob(batch.actions[envs])
    ratio = (log_prob - batch.log_probs[envs]).exp()
    adv = advantages[envs]
    adv = (adv - adv.mean()) / adv.std().clamp_min(1e-6)
    policy_loss = -torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv).mean()
    value_loss = args.vf_coef * (values[..., 0] - targets[envs]).pow(2).mean()
    return policy_loss + value_loss


def update(args, actor, critic, optimizer, batch, gae_out, generator, clip, timings) -> None:
    """PPO epochs over minibatches of whole env rows, gradients clipped per network."""
    advantages, targets = gae_out
    for _ in range(args.update_epochs):
        order = torch.randperm(args.num_envs, generator=generator)
        for envs in order.split(args.envs_per_minibatch):
            with timings("loss forward"):
                loss = ppo_losses(args, actor, critic, batch, advantages, targets, envs, clip)
            with timings("backward"):
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
            with timings("optimizer"):
                for group in optimizer.param_groups:
                    nn.utils.clip_grad_norm_(group["params"], args.max_grad_norm)
                optimizer.step()


@torch.no_grad()
def evaluate(args: Args, actor: RecurrentNet) -> float:
    """Mean return of ``eval_episodes`` fresh episodes (one per env) with greedy actions."""
    env = BatchedCartPole(args.eval_episodes, args.seed + 1_000_003, args.obs_scale, 1.0)
    obs, is_init = env.reset(), torch.ones(args.eval_episodes, dtype=torch.bool)
    state = actor.initial_state(args.eval_episodes)
    returns = torch.full((args.eval_episodes,), float("nan"))
    while bool(returns.isnan().any()):
        logits, state = actor.step(obs, state, is_init)
        step = env.step(logits.argmax(-1))
        first = step.done & returns.isnan()
        returns[first] = step.ended_returns[first[step.done]]
        obs, is_init = step.obs, step.done
    return float(returns.mean())


@dataclass
class Run:
    """What :func:`train` returns: per batch ``(frames, seconds, returns ended in it)``."""

    history: list[tuple[int, float, list[float]]]
    timings: dict[str, float]
    final_eval: float


def train(args: Args) -> Run:
    """Trains one seed; seconds count from the first batch (set-up excluded)."""
    torch.manual_seed(args.seed)
    env = BatchedCartPole(args.num_envs, args.seed, args.obs_scale, args.reward_scale)
    actor = RecurrentNet(env.obs_dim, args.hidden, args.head, env.num_actions)
    critic = RecurrentNet(env.obs_dim, args.hidden, args.head, 1)
    optimizer = torch.optim.Adam(
        [{"params": actor.parameters()}, {"params": critic.parameters()}],
        lr=args.learning_rate, eps=args.adam_eps,
    )  # fmt: skip
    generator = torch.Generator().manual_seed(args.seed)
    rollout, timings, history, frames = Rollout(args, env, actor, critic), Timings(), [], 0
    start = time.perf_counter()
    while frames < args.total_frames:
        left = max(0.0, 1.0 - frames / args.total_frames)
        for group in optimizer.param_groups:
            group["lr"] = args.learning_rate * left
        with timings("collect"):
            batch = rollout.collect()
        with timings("gae"):
            gae_out = gae(batch, args.gamma, args.gae_lambda)
        frames += args.batch_frames
        clip = args.clip_coef * left
        update(args, actor, critic, optimizer, batch, gae_out, generator, clip, timings)
        history.append((frames, time.perf_counter() - start, batch.ended_returns))
    return Run(history, dict(timings.totals), evaluate(args, actor))
