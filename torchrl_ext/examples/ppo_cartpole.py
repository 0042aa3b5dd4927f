"""Recurrent PPO on partially observable CartPole, from stock TorchRL parts and ours.

Run it with ``python -m torchrl_ext.examples ppo [--seeds 0 1 2] [--policy lstm|mlp]
[--frames N] [--device cpu] [--save-every N] [--resume DIR]``.

The pipeline, top to bottom:

1. :class:`~torchrl_ext.envs.CartPoleEnv` with ``observe_velocity=False`` (the agent sees the
   cart position and the pole angle only, so it must infer velocities from memory), in a
   :class:`~torchrl.envs.TransformedEnv` with ``InitTracker`` (``is_init``), ``StepCounter``,
   ``RewardSum`` (episode returns), a constant ``RewardScaling`` and ``ObservationNorm`` and
   the LSTMs' state primers.
2. An actor-critic with *separate* LSTMs (as sb3-contrib's ``RecurrentPPO``): the critic's value
   error never shapes the actor's memory, and the actor's state carried across batches is the
   one it acted with.
3. :class:`~torchrl.collectors.Collector` gathers ``[num_envs, steps]`` batches and carries both
   LSTMs' states across batches.
4. :class:`~torchrl_ext.objectives.RecurrentGAE` recomputes the critic over whole rows in one
   pass, starting each row from the critic state stored at collection time
   (``initial_state="stored"``), and writes ``advantage``, ``value_target``.
5. :class:`~torchrl_ext.data.minibatches.EnvMajorMinibatches` hands out whole env rows, so the
   LSTMs replay each row from its stored state (resetting at ``is_init``), and torchrl's
   :class:`~torchrl.objectives.ClipPPOLoss` takes the gradient steps.

Learning rate and clip range decay linearly to zero over the frame budget. Each network's
gradient is clipped on its own. A run logs through a :mod:`torchrl.record.loggers` logger
(``<run folder>/scalars/*.csv`` by default), draws ``learning_curve.png``, evaluates the policy's
mode (deterministic actions) on fresh episodes and prints where the time went. Every
``--save-every`` frames it saves the networks, the optimizer, the env and collector state, the
random generators and its counters; ``--resume DIR`` continues bitwise.

Randomness: the envs take ``seed`` directly; the network initialization and the actions drawn
by the collector use torch's global generator, which :func:`train` seeds inside
:func:`torch.random.fork_rng`, so the caller's global RNG state is left as it was; minibatch
permutations come from their own :class:`torch.Generator`.

Settings start from sb3-contrib's RL-Zoo settings for CartPoleNoVel-v1; what changed and why
(reward scaling, per-network gradient clipping, observation factors, 16 envs x 32 steps with 8
epochs) is on the PPO results page of the documentation.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.envs import (
    Compose,
    InitTracker,
    ObservationNorm,
    RewardScaling,
    RewardSum,
    StepCounter,
    TransformedEnv,
)
from torchrl.modules import ProbabilisticActor, set_recurrent_mode

from torchrl_ext.data.minibatches import EnvMajorMinibatches
from torchrl_ext.envs import CartPoleEnv
from torchrl_ext.examples import _checkpointing, _common, _config, _configs, _ppo, _run_folder
from torchrl_ext.examples._common import completed_returns
from torchrl_ext.modules import LSTMModule

# The run's config, its defaults and its --quick overrides live in the torch-free _configs, so
# that the command line builds the config, and refuses a bad one, before importing this module.
Config = _configs.PPOCartPoleConfig
SIZE, LEARNING = _configs.PPO_CARTPOLE_SIZE, _configs.PPO_CARTPOLE_LEARNING
QUICK = _configs.PPO_CARTPOLE_QUICK
PolicyKind = _configs.PolicyKind

ACTOR_STATE = ("rs_actor_h", "rs_actor_c")
CRITIC_STATE = ("rs_critic_h", "rs_critic_c")


@dataclasses.dataclass
class Result(_common.TargetResult):
    """Outcome of one run.

    The fields of :class:`~torchrl_ext.examples._common.TargetResult` (``config`` to
    ``out``), then:

    Args:
        timings (dict): seconds spent per section of this process (collection, GAE, updates).
        curve (list): ``(frames, mean_return)`` after each batch.
    """

    timings: dict[str, float]
    curve: list[tuple[int, float]]

    @property
    def best_return(self) -> float:
        """Highest mean return logged after any batch (NaN before any episode ended)."""
        return best_mean(self.curve)


def best_mean(curve: list[tuple[int, float]]) -> float:
    """The highest mean return of a ``(frames, mean_return)`` curve (NaN if none is a number).

    With a window of the last 100 episodes this is POPGym's maximum mean episodic reward.

    Examples:
        >>> best_mean([(64, float("nan")), (128, 0.25), (192, 0.5), (256, 0.375)])
        0.5
    """
    returns = [c[1] for c in curve if not math.isnan(c[1])]
    return max(returns) if returns else float("nan")


# ---------------------------------------------------------------------------- model
def make_memory(
    cfg: Config, obs_dim: int, out_key: str, state: tuple[str, str], in_key: str = "observation"
) -> Any:
    """The recurrent (or feed-forward) trunk that reads ``in_key`` into ``out_key``."""
    if cfg.policy == "lstm":
        return LSTMModule(
            input_size=obs_dim,
            hidden_size=cfg.hidden,
            in_keys=[in_key, *state],
            out_keys=[out_key, *(("next", k) for k in state)],
        )
    mlp = nn.Sequential(nn.Linear(obs_dim, cfg.hidden), nn.ReLU())
    return TensorDictModule(mlp, in_keys=[in_key], out_keys=[out_key])


def make_head(cfg: Config, out_features: int, in_key: str, out_key: str) -> TensorDictModule:
    """One hidden ReLU layer of width ``cfg.head``, then a linear output."""
    net = nn.Sequential(
        nn.Linear(cfg.hidden, cfg.head), nn.ReLU(), nn.Linear(cfg.head, out_features)
    )
    return TensorDictModule(net, in_keys=[in_key], out_keys=[out_key])


def make_agent(cfg: Config, obs_dim: int) -> tuple[ProbabilisticActor, TensorDictSequential]:
    """Actor (categorical over the two pushes) and critic, each with its own memory."""
    actor_memory = make_memory(cfg, obs_dim, "actor_embed", ACTOR_STATE)
    actor = ProbabilisticActor(
        TensorDictSequential(actor_memory, make_head(cfg, 2, "actor_embed", "logits")),
        in_keys=["logits"],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )
    critic_memory = make_memory(cfg, obs_dim, "critic_embed", CRITIC_STATE)
    critic = TensorDictSequential(critic_memory, make_head(cfg, 1, "critic_embed", "state_value"))
    return actor, critic


def memories(actor: ProbabilisticActor, critic: TensorDictSequential) -> list[Any]:
    """The trunks of actor and critic (the first module of each)."""
    return [actor.module[0][0], critic[0]]


def collection_policy(actor: ProbabilisticActor, critic: TensorDictSequential) -> Any:
    """What the collector runs: the actor, then the critic up to its head if it has an LSTM.

    Running the critic's LSTM during collection stores the critic state each step starts from,
    which :class:`~torchrl_ext.objectives.RecurrentGAE` replays the rows from.
    """
    trunk = list(critic.module)[:-1]
    if any(isinstance(module, LSTMModule) for module in trunk):
        return TensorDictSequential(actor, *trunk)
    return actor


# ---------------------------------------------------------------------------- env
def make_env(
    cfg: Config, num_envs: int, seed: int, primers: list[Any], device: torch.device
) -> TransformedEnv:
    """Partially observable CartPole with episode tracking, fixed scaling and state primers."""
    base = CartPoleEnv(num_envs, seed=seed, observe_velocity=False, device=device)
    transforms = [
        InitTracker(),
        StepCounter(),
        RewardSum(),  # before the scaling: episode returns stay in CartPole's units
        RewardScaling(loc=0.0, scale=cfg.reward_scale),
        ObservationNorm(
            loc=torch.zeros(2), scale=torch.tensor(cfg.obs_scale), in_keys=["observation"]
        ),
    ]
    transforms += [m.make_tensordict_primer() for m in primers if isinstance(m, LSTMModule)]
    return TransformedEnv(base, Compose(*transforms).to(device))


def evaluate(
    cfg: Config,
    actor: ProbabilisticActor,
    primers: list[Any],
    device: torch.device,
    env_maker: Callable[..., TransformedEnv] = make_env,
) -> float:
    """Mean return of ``cfg.eval_episodes`` fresh episodes with deterministic (mode) actions.

    Runs one episode per env on a new env (``env_maker``'s, seed ``cfg.eval_seed``) and stops
    when every env has finished its first episode (at most the env's time limit).
    """
    env = env_maker(cfg, cfg.eval_episodes, cfg.eval_seed, primers, device)
    return _common.mean_first_return(env, actor, cfg.eval_episodes, device)


# ---------------------------------------------------------------------------- learning
def make_loss(cfg: Config, actor: ProbabilisticActor, critic: TensorDictSequential) -> Any:
    """ClipPPOLoss with RecurrentGAE as its value estimator."""
    return _ppo.ppo_loss(cfg, actor, critic, initial_state="stored")


def update(
    cfg: Config,
    batch: TensorDictBase,
    loss: Any,
    optim: torch.optim.Optimizer,
    generator: torch.Generator,
) -> dict[str, float]:
    """PPO epochs over env-major minibatches of whole rows.

    Returns the last minibatch's losses, plus ``first_max_ratio``: the largest probability
    ratio on the first minibatch, before any step. It is 1 when the actor, replaying each row
    from its stored state and resetting at ``is_init``, reproduces the collection-time
    log-probabilities.
    """
    minibatches = EnvMajorMinibatches(
        _ppo.loss_inputs(batch, loss),
        cfg.envs_per_minibatch,
        epochs=cfg.epochs,
        generator=generator,
    )
    first_max_ratio = None
    for minibatch in minibatches:
        with set_recurrent_mode(True):
            out = loss(minibatch)
        if first_max_ratio is None:
            first_max_ratio = float(out["max_ratio"])
        stats = _ppo.ppo_step(out, optim, cfg.max_grad_norm)
    return {**stats, "first_max_ratio": first_max_ratio}


def check_batch(cfg: Config, batch: TensorDictBase, first: bool) -> None:
    """Asserts the shapes and masks a recurrent PPO update relies on (used by ``--quick``)."""
    n, t = cfg.num_envs, cfg.steps
    assert batch.batch_size == (n, t), batch.batch_size
    for key in ("advantage", "value_target", "state_value"):
        assert batch[key].shape == (n, t, 1), (key, batch[key].shape)
        assert bool(torch.isfinite(batch[key]).all()), key
    is_init = _common.check_is_init(batch, first)
    if cfg.policy == "lstm":
        for key in (*ACTOR_STATE, *CRITIC_STATE):
            assert batch[key].shape == (n, t, 1, cfg.hidden), (key, batch[key].shape)
            assert bool((batch[key][is_init] == 0).all()), f"{key} must be zero at is_init"


# ---------------------------------------------------------------------------- training
@dataclasses.dataclass(frozen=True)
class Task:
    """What :func:`train` learns on: the env, the agent, how to evaluate and plot.

    The default is this module's CartPole without velocities; other pipelines (POPGym's memory
    tasks) hand their own to the same training loop.

    Args:
        make_env (callable): ``(cfg, num_envs, seed, primers, device)`` to the transformed env.
        make_agent (callable): ``(cfg)`` to ``(actor, critic)``.
        title (str): the learning curve's title.
        memories (callable, optional): ``(actor, critic)`` to their recurrent trunks (whose
            primers the env needs). Defaults to :func:`memories`.
    """

    make_env: Callable[..., TransformedEnv]
    make_agent: Callable[[Any], tuple[ProbabilisticActor, TensorDictSequential]]
    title: str
    memories: Callable[[ProbabilisticActor, TensorDictSequential], list[Any]] = memories


CARTPOLE = Task(
    make_env, lambda cfg: make_agent(cfg, obs_dim=2), "PPO on CartPole without velocities"
)


def train(
    cfg: Config, run: _run_folder.RunOptions, *, quick: bool = False, task: Task = CARTPOLE
) -> Result:
    """Trains, evaluates and logs one run; the caller's global RNG state is left as it was.

    Args:
        cfg (Config): hyperparameters.
        run (RunOptions): run folder, logger, checkpoint period, device, resume.
        quick (bool, optional): check shapes, masks, stored-state replay and finite losses on
            every batch (meant for a few batches). Defaults to ``False``.
        task (Task, optional): env and agent. Defaults to CartPole without velocities.
    """
    return _common.seeded(cfg.seed, _train, cfg, run, quick, task)


def _train(cfg: Config, run: _run_folder.RunOptions, quick: bool, task: Task) -> Result:
    device = _common.device(run.device)
    watch = _common.Stopwatch()
    actor, critic = task.make_agent(cfg)
    actor, critic = actor.to(device), critic.to(device)
    primers = task.memories(actor, critic)
    env = task.make_env(cfg, cfg.num_envs, cfg.seed, primers, device)
    loss = make_loss(cfg, actor, critic)
    optim = _ppo.ppo_optimizer(cfg, loss)
    collector = _common.collector(env, collection_policy(actor, critic), cfg, device)
    checkpoints = _checkpointing.Checkpoints(run, cfg, loss, optim, env, collector)
    logger, generator = checkpoints.logger, checkpoints.generator
    counters, window = checkpoints.start_window(cfg.return_window, cfg.target, curve=[])
    frames, curve, seconds = counters["frames"], counters["curve"], counters["seconds"]
    bar = _run_folder.progress_bar(cfg.frames, frames, run)
    start = time.perf_counter() - seconds

    for batch in _ppo.gae_batches(collector, loss, watch, frames, cfg.frames):
        if quick:
            check_batch(cfg, batch, first=frames == 0)
        previous, frames = frames, frames + batch.numel()
        left = _ppo.anneal(cfg, loss, optim, previous)
        with watch("update"):
            losses = update(cfg, batch, loss, optim, generator)
        if quick:
            assert all(math.isfinite(v) for v in losses.values()), losses
            assert abs(losses["first_max_ratio"] - 1.0) < 1e-3, "stored states must replay"
        seconds = time.perf_counter() - start
        mean_return = window.update(completed_returns(batch).tolist(), frames, seconds)
        curve.append((frames, mean_return))
        row = {
            "mean_return": mean_return,
            "best_mean_return": best_mean(curve),
            "episodes_in_window": len(window.recent),
            "lr": cfg.lr * left,
            "clip": cfg.clip * left,
            **losses,
        }
        bar.update(batch.numel())
        bar.set_postfix(mean_return=f"{mean_return:.1f}")
        counters = _common.window_counters(frames, seconds, window, curve=curve)
        checkpoints.end_batch(row, counters, previous)
    bar.close()
    final_eval = evaluate(cfg, actor, primers, device, task.make_env)
    logger.log_scalar("final_eval", final_eval, step=frames)
    checkpoints.save({**counters, "evaluated": True})
    collector.shutdown()
    label = f"{cfg.policy} seed {cfg.seed}"
    _common.plot_curves(run.out / "learning_curve.png", {label: curve}, cfg.target, task.title)
    return Result.of(
        cfg, window, final_eval, frames, seconds, run.out, timings=dict(watch.totals), curve=curve
    )


# ---------------------------------------------------------------------------- command line
def summary(result: Result) -> str:
    """What a run reached, and where the time went."""
    cfg = result.config
    reached = _common.reached(cfg.target, result.frames_to_target, result.seconds_to_target)
    times = ", ".join(f"{name} {sec:.1f} s" for name, sec in result.timings.items())
    return (
        f"ppo {cfg.policy} seed {cfg.seed}: {reached}; deterministic evaluation "
        f"{result.final_eval:.1f} over {cfg.eval_episodes} episodes; {result.frames:,} frames "
        f"in {result.seconds:.1f} s ({times}); log: {result.out}"
    )


def config_of(args: argparse.Namespace, seed: int, policy: PolicyKind = "lstm") -> Config:
    """The run's hyperparameters from the command line (``--quick``, ``--frames``)."""
    return _config.config_of(args, Config, QUICK, seed=seed, policy=policy)


def main(args: argparse.Namespace) -> list[Result]:
    """Runs ``python -m torchrl_ext.examples ppo`` (see ``--help``)."""
    return _common.train_seeds(
        args, args.pipeline, train, summary, Config, QUICK, policy=args.policy
    )
