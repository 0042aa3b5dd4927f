"""R2D2 on partially observable CartPole, from TorchRL blocks and ours.

Run it with ``python -m torchrl_ext.examples r2d2 [--seeds 0 1 2] [--frames N] [--device cpu]``.

The pipeline, top to bottom:

1. :class:`~torchrl_ext.envs.CartPoleEnv` with ``observe_velocity=False`` (the agent sees the
   cart position and the pole angle, so it must infer velocities from memory) in a
   :class:`~torchrl.envs.TransformedEnv`: ``InitTracker`` (``is_init``), ``RewardSum`` (episode
   returns), a constant ``ObservationNorm`` (the termination bounds become 1) and the LSTM's
   state primer.
2. The Q-network: a linear embedding, an :class:`~torchrl_ext.modules.LSTMModule` (TorchRL's,
   running each row in one pass when training) and a two-layer head writing ``action_value``;
   :class:`~torchrl.modules.QValueModule` picks the greedy action and
   :class:`~torchrl.modules.EGreedyModule` explores, with an Ape-X-style exploration rate per
   env (:func:`epsilons`).
3. :class:`~torchrl.collectors.Collector` gathers ``[num_envs, steps]`` batches; each record
   carries the LSTM state the actor had *before* it (``recurrent_state_h/c``).
4. The batches go into a prioritized :class:`~torchrl.data.TensorDictReplayBuffer` over a
   time x env ``LazyTensorStorage(ndim=2)``, whose :class:`torchrl_ext.data.Sequence` sample unit
   expands every sampled anchor into a ``[burn_in + length + n_step - 1]`` window of its env.
5. :class:`torchrl_ext.objectives.R2D2Loss` burns in from the stored state without gradient and
   regresses the learning records onto n-step double-Q targets with value rescaling; its
   per-record ``td_error`` goes back as one priority per anchor (R2D2's eta mixture), and
   torchrl's :class:`~torchrl.objectives.HardUpdate` copies the online network into the target.

The learning rate stays constant for the first half of the frame budget, then decays linearly
to a tenth, so the policy settles instead of oscillating around the solution once solved.
Every ``--save-every`` frames the run saves the networks, the optimizer, the env and collector
state, the replay buffer (``rb.dumps``), the random generators and the counters; ``--resume
DIR`` continues bitwise. Both are read back as data only: the checkpoint with
``weights_only=True``, the replay folder through :func:`torchrl_ext.data.load_replay`.

Randomness: the envs take ``seed``; the initialization and the exploration draws use torch's
global generator, seeded inside :func:`torch.random.fork_rng` (the caller's state is left
alone); the replay buffer samples with its own :class:`torch.Generator`.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer
from torchrl.envs import (
    Compose,
    InitTracker,
    ObservationNorm,
    RewardSum,
    TransformedEnv,
)
from torchrl.modules import EGreedyModule, QValueModule
from torchrl.objectives import HardUpdate

from torchrl_ext.data import Sequence, load_replay
from torchrl_ext.envs import CartPoleEnv
from torchrl_ext.examples import _checkpointing, _common, _configs, _run_folder
from torchrl_ext.examples._r2d2_schedules import epsilons as epsilons
from torchrl_ext.examples._r2d2_schedules import learning_rate as learning_rate
from torchrl_ext.modules import LSTMModule
from torchrl_ext.objectives import R2D2Loss

# The run's config, its defaults and its --quick overrides live in the torch-free _configs, so
# that the command line builds the config, and refuses a bad one, before importing this module.
Config = _configs.R2D2CartPoleConfig
SIZE, LEARNING = _configs.R2D2_CARTPOLE_SIZE, _configs.R2D2_CARTPOLE_LEARNING
QUICK = _configs.R2D2_CARTPOLE_QUICK

STATE = ("recurrent_state_h", "recurrent_state_c")
#: Termination bounds of the observed ``(x, theta)``: the observation scale.
BOUNDS = (2.4, 12 * 2 * math.pi / 360)
#: What the replay buffer stores of each collected record.
STORED = (
    "observation",
    "action",
    "is_init",
    *STATE,
    ("next", "observation"),
    ("next", "reward"),
    ("next", "done"),
    ("next", "terminated"),
    ("next", "truncated"),
)


@dataclasses.dataclass
class Result(_common.TargetResult):
    """Outcome of one run.

    The fields of :class:`~torchrl_ext.examples._common.TargetResult` (``config`` to
    ``out``), then:

    Args:
        lowest_after_target (float or None): the lowest logged mean return after the first
            crossing of the target (how far the return dipped once solved).
        best_return (float): the highest mean return after any batch (NaN before any
            episode ended).
    """

    lowest_after_target: float | None = None
    best_return: float = math.nan


# ---------------------------------------------------------------------------- env and agent
def make_env(cfg: Config, num_envs: int, seed: int, device: torch.device) -> TransformedEnv:
    """Partially observable CartPole with reset flags, episode returns and a fixed scale."""
    base = CartPoleEnv(num_envs, seed=seed, observe_velocity=False, device=device)
    transforms = Compose(
        InitTracker(),
        RewardSum(),
        ObservationNorm(
            loc=torch.zeros(2), scale=1 / torch.tensor(BOUNDS), in_keys=["observation"]
        ),
        make_lstm(cfg).make_tensordict_primer(),
    )
    return TransformedEnv(base, transforms.to(device))


def make_lstm(cfg: Config) -> LSTMModule:
    """The Q-network's memory; it reads and writes its state under ``STATE``."""
    return LSTMModule(
        input_size=cfg.hidden,
        hidden_size=cfg.hidden,
        in_keys=["embed", *STATE],
        out_keys=["memory", *(("next", k) for k in STATE)],
    )


def make_qnet(cfg: Config) -> TensorDictSequential:
    """Embedding, LSTM and head: ``observation`` (and the stored state) to ``action_value``."""
    embed = nn.Sequential(nn.Linear(2, cfg.hidden), nn.ReLU())
    head = nn.Sequential(nn.Linear(cfg.hidden, cfg.hidden), nn.ReLU(), nn.Linear(cfg.hidden, 2))
    return TensorDictSequential(
        TensorDictModule(embed, in_keys=["observation"], out_keys=["embed"]),
        make_lstm(cfg),
        TensorDictModule(head, in_keys=["memory"], out_keys=["action_value"]),
    )


def make_loss(cfg: Config, qnet: TensorDictSequential) -> R2D2Loss:
    """R2D2's loss over ``qnet``: burn-in, n-step double-Q targets, value rescaling."""
    return R2D2Loss(
        qnet,
        burn_in=cfg.burn_in,
        n_step=cfg.n_step,
        gamma=cfg.gamma,
        value_rescaling=cfg.value_rescaling,
    )


def make_unit(cfg: Config) -> Sequence:
    """Windows of ``cfg.window`` records whose priorities go back with R2D2's mixture.

    The unit writes priorities back (``unit.update_priority(rb, sample)``) with R2D2's mixture
    over the learning records.
    """
    return Sequence(
        cfg.length,
        burn_in=cfg.burn_in,
        bootstrap=cfg.n_step - 1,
        layout="batch_time",
        priority_reduction="mixture",
        priority_eta=cfg.eta,
        priority_learning_only=True,
    )


def make_buffer(cfg: Config) -> tuple[Sequence, TensorDictPrioritizedReplayBuffer]:
    """Prioritized windows of ``cfg.window`` records over a time x env storage, and their unit."""
    unit = make_unit(cfg)
    return unit, TensorDictPrioritizedReplayBuffer(
        alpha=cfg.alpha,
        beta=cfg.beta,
        storage=LazyTensorStorage(cfg.capacity, ndim=2),
        sample_unit=unit,
        batch_size=cfg.batch_size,
        priority_key="td_error",
        generator=torch.Generator().manual_seed(cfg.seed + 1),
    )


def evaluate(
    cfg: Config,
    policy: Any,
    device: torch.device,
    env_maker: Callable[..., TransformedEnv] = make_env,
) -> float:
    """Mean return of ``cfg.eval_episodes`` greedy episodes, one per env on a fresh seed."""
    env = env_maker(cfg, cfg.eval_episodes, cfg.eval_seed, device)
    return _common.mean_first_return(env, policy, cfg.eval_episodes, device)


def check_sample(cfg: Config, sample: TensorDictBase, out: TensorDictBase) -> None:
    """Asserts the window geometry, masks and stored states the loss relies on (``--quick``)."""
    b, t = cfg.batch_size, cfg.window
    assert sample.batch_size == (b, t), sample.batch_size
    learning = sample["learning_mask"]
    assert not bool(learning[:, : cfg.burn_in].any()), "burn-in records never learn"
    assert sample["recurrent_state_h"].shape == (b, t, 1, cfg.hidden)
    assert sample["td_error"].shape == (b, t) and bool((sample["td_error"][~learning] == 0).all())
    assert math.isfinite(float(out["loss"].detach())), out


# ---------------------------------------------------------------------------- training
@dataclasses.dataclass(frozen=True)
class Task:
    """What :func:`train` learns on: the env and the Q-network.

    The default is this module's CartPole without velocities; the POPGym pipeline hands its
    own to the same training loop.

    Args:
        make_env (callable): ``(cfg, num_envs, seed, device)`` to the transformed env, with
            the primer of the Q-network's LSTM state (:data:`STATE`).
        make_qnet (callable): ``(cfg)`` to the Q-network writing ``action_value``.
        stored (tuple, optional): the entries of each record the replay buffer keeps: what
            the Q-network reads, and the loss's inputs. Defaults to :data:`STORED`.
    """

    make_env: Callable[..., TransformedEnv]
    make_qnet: Callable[[Any], TensorDictSequential]
    stored: tuple = STORED


CARTPOLE = Task(make_env, make_qnet)


def train(
    cfg: Config, run: _run_folder.RunOptions, *, quick: bool = False, task: Task = CARTPOLE
) -> Result:
    """Trains one seed; see the module docstring. The caller's global RNG state is kept."""
    return _common.seeded(cfg.seed, _train, cfg, run, quick, task)


def _train(cfg: Config, run: _run_folder.RunOptions, quick: bool, task: Task) -> Result:
    device = _common.device(run.device)
    qnet = task.make_qnet(cfg).to(device)
    policy = TensorDictSequential(qnet, QValueModule(action_space="categorical"))
    env = task.make_env(cfg, cfg.num_envs, cfg.seed, device)
    egreedy = EGreedyModule(env.action_spec, eps_init=1.0, eps_end=cfg.eps_end).to(device)
    egreedy.eps = epsilons(cfg, 0).to(device)  # one rate per env, set every batch
    loss_fn = make_loss(cfg, qnet)
    target_updater = HardUpdate(loss_fn, value_network_update_interval=cfg.target_period)
    optim = torch.optim.Adam(
        loss_fn.value_network_params.values(True, True), lr=cfg.lr, foreach=True
    )
    unit, rb = make_buffer(cfg)
    explorer = TensorDictSequential(policy, egreedy)
    collector = _common.collector(env, explorer, cfg, device)
    logger = _run_folder.make_logger(run.logger, run.out, run.resume)
    counters = {"frames": 0, "updates": 0, "seconds": 0.0, "hit": None, "recent": deque()}
    if run.resume:
        folder = _run_folder.find_checkpoint(run.out)
        state = _run_folder.load_checkpoint(folder)
        _restore(state, loss_fn, optim, env, collector, rb, target_updater, logger, run, folder)
        counters = state["counters"]
    frames, updates, seconds = counters["frames"], counters["updates"], counters["seconds"]
    window = _common.ReturnWindow.resumed(cfg.return_window, cfg.target, counters)
    best = counters.get("best", math.nan)
    bar = _run_folder.progress_bar(cfg.frames, frames, run)
    start, loss, batches = time.perf_counter() - counters["seconds"], math.nan, iter(collector)
    while frames < cfg.frames:
        batch = next(batches)
        previous, frames = frames, frames + batch.numel()
        rb.extend(batch.select(*task.stored))
        egreedy.eps.copy_(epsilons(cfg, frames))
        if frames >= cfg.warmup_frames:
            for group in optim.param_groups:
                group["lr"] = learning_rate(cfg, frames)
            sample = rb.sample().to(device)
            out = loss_fn(sample)
            _common.gradient_step(out["loss"], optim, cfg.max_grad_norm)
            target_updater.step()
            unit.update_priority(rb, sample)
            updates, loss = updates + 1, float(out["loss"].detach())
            if quick:
                check_sample(cfg, sample, out)
        seconds = time.perf_counter() - start
        mean_return = window.update(_common.completed_returns(batch).tolist(), frames, seconds)
        best = max(best, mean_return) if not math.isnan(best) else mean_return
        if (frames // cfg.frames_per_batch) % cfg.log_every == 0 or frames >= cfg.frames:
            lr, eps = optim.param_groups[0]["lr"], float(egreedy.eps.mean())
            row = {
                "mean_return": mean_return,
                "best_mean_return": best,
                "loss": loss,
                "updates": updates,
                "lr": lr,
                "epsilon": eps,
            }
            _run_folder.log_row(logger, {**row, "seconds": seconds}, frames)
            bar.set_postfix(ret=f"{mean_return:.0f}", loss=f"{loss:.3f}")
        bar.update(frames - previous)
        counters = {
            "frames": frames,
            "updates": updates,
            "seconds": seconds,
            "hit": window.hit,
            "recent": list(window.recent),
            "best": best,
        }
        if _run_folder.save_due(frames, previous, run, cfg.frames):
            _save(run, cfg, counters, loss_fn, optim, env, collector, rb, target_updater, logger)
    bar.close()
    final_eval = evaluate(cfg, policy, device, task.make_env)
    logger.log_scalar("final_eval", final_eval, step=frames)
    _save(
        run,
        cfg,
        {**counters, "evaluated": True},
        loss_fn,
        optim,
        env,
        collector,
        rb,
        target_updater,
        logger,
    )
    collector.shutdown()
    lowest = lowest_after(run, window.hit)
    return Result.of(
        cfg,
        window,
        final_eval,
        frames,
        seconds,
        run.out,
        lowest_after_target=lowest,
        best_return=best,
    )


def lowest_after(run: _run_folder.RunOptions, hit: tuple[int, float] | None) -> float | None:
    """The lowest mean return logged after ``hit`` (CSV logs only; ``None`` otherwise)."""
    if hit is None or run.logger != "csv":
        return None
    return min(v for step, v in _run_folder.read_scalars(run.out)["mean_return"] if step > hit[0])


# ---------------------------------------------------------------------------- checkpoints
def _save(run, cfg, counters, loss_fn, optim, env, collector, rb, target_updater, logger):
    """Everything a bitwise continuation needs, the replay buffer in the same checkpoint."""
    _checkpointing.save_run(
        run,
        cfg,
        counters,
        loss_fn,
        optim,
        env,
        collector,
        logger,
        target_updater=target_updater.counter,
        files={"replay": rb.dumps},
    )


def _restore(state, loss_fn, optim, env, collector, rb, target_updater, logger, run, folder):
    _checkpointing.restore_run(run, state, loss_fn, optim, env, collector, logger)
    load_replay(rb, folder / "replay")
    target_updater.counter = state["target_updater"]


# ---------------------------------------------------------------------------- command line
def summary(result: Result, command: str = "r2d2") -> str:
    """One line per run, starting with the ``command`` that ran it."""
    cfg = result.config
    reached = _common.reached(cfg.target, result.frames_to_target, result.seconds_to_target, ".0f")
    return (
        f"{command} seed {cfg.seed}: {reached}; greedy evaluation {result.final_eval:.1f}; "
        f"{result.frames:,} frames in {result.seconds:.0f} s; log: {result.out}"
    )


def table(results: list[Result]) -> str:
    """The per-seed markdown table.

    Examples:
        >>> from pathlib import Path
        >>> r = Result(Config(), 208_512, 162.0, 412.1, 400_000, 308.0, Path("."), 315.2)
        >>> print(table([r]).splitlines()[-1])
        | 0 | 208,512 | 162 | 315.2 | 412.1 | 400,000 | 308 |
    """
    lines = [
        "| seed | frames to 400 | seconds to 400 | lowest mean return after | greedy eval "
        "| frames | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        reached = r.frames_to_target is not None
        lines.append(
            f"| {r.config.seed} | {f'{r.frames_to_target:,}' if reached else 'not reached'} | "
            f"{f'{r.seconds_to_target:.0f}' if reached else '–'} | "
            f"{f'{r.lowest_after_target:.1f}' if r.lowest_after_target is not None else '–'} | "
            f"{r.final_eval:.1f} | {r.frames:,} | {r.seconds:.0f} |"
        )
    return "\n".join(lines)


def main(args: argparse.Namespace) -> list[Result]:
    """Runs ``python -m torchrl_ext.examples r2d2`` (see ``--help``)."""
    results = _common.train_seeds(args, args.pipeline, train, summary, Config, QUICK)
    if len(results) > 1:
        print(table(results))
    return results
