"""Feed-forward PPO that learns to drive procedurally generated courses (CourseEnv).

Run it with ``python -m torchrl_ext.examples course [--seeds 0 1 2] [--frames N]
[--device cpu] [--save-every N] [--resume DIR]``.

The pipeline, top to bottom:

1. :class:`~torchrl_ext.envs.CourseEnv` with its default auto-reset policy: an episode that
   finishes its lap, hits the step limit or draws an unusable course ends with a **new course**
   (masked regeneration), a crash respawns on the same course. Wrapped in a
   :class:`~torchrl.envs.TransformedEnv` with ``InitTracker``, ``StepCounter`` and a fixed
   ``ObservationNorm`` (range readings and speed over their maxima, checkpoint distance over the
   checkpoint spacing).
2. An MLP actor (a Gaussian over ``(steer, throttle)`` with a learned, state-independent scale;
   the env clips samples to ``[-1, 1]``) and an MLP critic.
3. :class:`~torchrl.collectors.Collector` gathers ``[num_envs, steps]`` batches.
4. :class:`~torchrl_ext.objectives.RecurrentGAE` with the feed-forward critic writes
   ``advantage`` and ``value_target`` (bootstrapping through step-limit truncations).
5. :class:`~torchrl.objectives.ClipPPOLoss` on shuffled flat minibatches.

What is measured: every episode that starts right after a regeneration drives a course nobody
has seen before. :class:`EpisodeTracker` follows each env through the batches and records, for
each completed episode, its return, the checkpoints it passed, whether it finished the lap, its
length and whether it was on a fresh course. The learning curve is the mean over the last
``return_window`` fresh-course episodes; before and after training the policy's mode drives one
episode on each of ``eval_episodes`` courses of an unseen seed.

Each run logs through a :mod:`torchrl.record.loggers` logger (``<run folder>/scalars/*.csv`` by
default) and saves the networks, the optimizer, the env and collector state, the episode
tracker, the random generators and its counters every ``--save-every`` frames; ``--resume DIR``
continues bitwise.

Randomness: the envs take ``seed`` directly; the network initialization and the actions drawn
by the collector use torch's global generator, which :func:`train` seeds inside
:func:`torch.random.fork_rng` (the caller's global RNG state is left as it was); minibatch
permutations come from their own :class:`torch.Generator`.

This module holds the pipeline's steps; the episode tracker, its window means and the plot
live in ``_course_metrics``, the networks' layers and the observation scale in
``_course_networks``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from collections import deque
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule
from torchrl.envs import (
    Compose,
    ExplorationType,
    InitTracker,
    ObservationNorm,
    StepCounter,
    TransformedEnv,
    set_exploration_type,
)
from torchrl.modules import IndependentNormal, ProbabilisticActor
from torchrl.objectives import ClipPPOLoss

from torchrl_ext.envs import CourseEnv
from torchrl_ext.envs.course import CourseParams
from torchrl_ext.examples import _checkpointing, _common, _configs, _ppo, _run_folder
from torchrl_ext.examples._course_metrics import (
    _METRICS,
    EpisodeTracker,
    plot_curves,
    window_means,
)
from torchrl_ext.examples._course_networks import GaussianHead, mlp, observation_scale

# The run's config, its defaults and its --quick overrides live in the torch-free _configs, so
# that the command line builds the config, and refuses a bad one, before importing this module.
Config = _configs.PPOCourseConfig
SIZE, LEARNING = _configs.PPO_COURSE_SIZE, _configs.PPO_COURSE_LEARNING
QUICK = _configs.PPO_COURSE_QUICK
EVAL_SEED = _configs.EVAL_SEED

__all__ = [
    "Config",
    "EpisodeTracker",
    "Result",
    "anneal",
    "check_batch",
    "evaluate",
    "main",
    "make_agent",
    "make_env",
    "make_loss",
    "make_optimizer",
    "train",
    "update",
    "window_means",
]


@dataclasses.dataclass
class Result:
    """Outcome of one run.

    Args:
        config (Config): the run's hyperparameters.
        frames (int): frames collected in total.
        seconds (float): training wall time (collection, GAE and updates).
        curve (list): one dict per batch: ``frames``, ``seconds`` and the window means
            ``return``, ``checkpoints``, ``finished``, ``length`` over fresh-course episodes.
        episodes (int): completed episodes on fresh courses.
        evaluation (dict): the same means for the deterministic policy, one episode on each
            of ``eval_episodes`` unseen courses.
        initial_evaluation (dict): the same evaluation before any training.
        timings (dict): seconds per section of this process.
        out (Path or None): the run folder.

    Examples:
        >>> from torchrl_ext.examples.ppo_course import Config, Result
        >>> result = Result(Config(), 0, 0.0, [], 0, {}, {}, {})
        >>> result.frames, result.out is None
        (0, True)
    """

    config: Config
    frames: int
    seconds: float
    curve: list[dict[str, float]]
    episodes: int
    evaluation: dict[str, float]
    initial_evaluation: dict[str, float]
    timings: dict[str, float]
    out: Path | None = None


# ---------------------------------------------------------------------------- env and model
def make_env(
    cfg: Config, num_envs: int, seed: int, device: torch.device | str = "cpu"
) -> TransformedEnv:
    """CourseEnv (default auto-reset) with ``is_init``, step counts and a fixed scaling."""
    base = CourseEnv(num_envs, seed=seed, max_steps=cfg.max_steps, device=device)
    transforms = Compose(
        InitTracker(),
        StepCounter(),
        ObservationNorm(
            loc=torch.zeros(base.num_rays + 3),
            scale=observation_scale(base.num_rays, base.car, CourseParams()),
            in_keys=["observation"],
        ),
    )
    return TransformedEnv(base, transforms.to(device))


def make_agent(cfg: Config, obs_dim: int) -> tuple[ProbabilisticActor, TensorDictModule]:
    """Gaussian MLP actor over ``(steer, throttle)`` and MLP critic."""
    head = GaussianHead(obs_dim, 2, cfg.hidden, cfg.init_scale)
    actor = ProbabilisticActor(
        TensorDictModule(head, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        distribution_class=IndependentNormal,
        return_log_prob=True,
    )
    critic = TensorDictModule(
        mlp(obs_dim, 1, cfg.hidden), in_keys=["observation"], out_keys=["state_value"]
    )
    return actor, critic


def make_loss(cfg: Config, actor: ProbabilisticActor, critic: TensorDictModule) -> ClipPPOLoss:
    """ClipPPOLoss with RecurrentGAE (feed-forward critic) as its value estimator."""
    return _ppo.ppo_loss(cfg, actor, critic)


def make_optimizer(cfg: Config, loss: ClipPPOLoss) -> torch.optim.Optimizer:
    """Adam over ``loss``'s networks, one parameter group (one gradient clip) per network."""
    return _ppo.ppo_optimizer(cfg, loss)


def anneal(cfg: Config, loss: ClipPPOLoss, optim: torch.optim.Optimizer, frames: int) -> float:
    """Sets learning rate and clip range to their linear decay at ``frames``; returns the rest.

    Both fall from their ``cfg`` values to zero over ``cfg.frames``; the return value is the
    fraction of the budget left (1 at the start, 0 at the end).
    """
    return _ppo.anneal(cfg, loss, optim, frames)


def update(
    cfg: Config,
    batch: TensorDictBase,
    loss: ClipPPOLoss,
    optim: torch.optim.Optimizer,
    generator: torch.Generator,
) -> dict[str, float]:
    """PPO epochs over shuffled flat minibatches; returns the last minibatch's losses."""
    flat = _ppo.loss_inputs(batch, loss).reshape(-1)
    size = min(cfg.minibatch_size, flat.numel())
    for _ in range(cfg.epochs):
        order = torch.randperm(flat.numel(), generator=generator)
        for start in range(0, flat.numel() - size + 1, size):
            out = loss(flat[order[start : start + size]])
            stats = _ppo.ppo_step(out, optim, cfg.max_grad_norm)
    return stats


def check_batch(cfg: Config, batch: TensorDictBase, first: bool) -> None:
    """Asserts the shapes and masks the update relies on (used by ``--quick``).

    Observations must be finite everywhere and exactly zero wherever the course is invalid
    (CourseEnv's ``valid`` gating), rewards zero there, ``is_init`` must mark the episode starts,
    and GAE's outputs must be finite.
    """
    n, t = cfg.num_envs, cfg.steps
    assert batch.batch_size == (n, t), batch.batch_size
    assert batch["action"].shape == (n, t, 2), batch["action"].shape
    for key in ("advantage", "value_target", "state_value", ("next", "reward")):
        assert batch[key].shape == (n, t, 1), (key, batch[key].shape)
        assert bool(torch.isfinite(batch[key]).all()), key
    for prefix in ((), ("next",)):
        obs = batch[(*prefix, "observation")]
        assert bool(torch.isfinite(obs).all()), "no NaN observation may reach the policy"
        invalid = ~batch[(*prefix, "valid")].squeeze(-1)
        assert bool((obs[invalid] == 0).all()), "invalid courses must observe zeros"
    invalid_next = ~batch["next", "valid"]
    assert bool((batch["next", "reward"][invalid_next] == 0).all()), "invalid: reward 0"
    _common.check_is_init(batch, first)


def evaluate(
    cfg: Config, actor: ProbabilisticActor, device: torch.device | str = "cpu"
) -> dict[str, float]:
    """The mode of the policy drives one episode on each of ``eval_episodes`` unseen courses.

    The eval envs start on course seeds ``cfg.eval_seed`` to ``cfg.eval_seed + n - 1`` and run
    until every env has ended its first episode on a valid course (at most ``max_steps`` steps
    each; an env whose course is unusable moves on to its next course).
    """
    n = cfg.eval_episodes
    env = make_env(cfg, n, cfg.eval_seed, device)
    tracker = EpisodeTracker(n)
    results: dict[int, dict[str, float]] = {}
    td = env.reset()
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        while len(results) < n:
            td, next_root = env.step_and_maybe_reset(actor(td))
            for episode in tracker.update(td.unsqueeze(-1)):
                results.setdefault(int(episode["env"]), episode)
            td = next_root
    env.close()
    return window_means(list(results.values()))


PLOT_TITLE = "PPO on CourseEnv: episodes on freshly generated courses (last 100)"


# ---------------------------------------------------------------------------- training
def train(cfg: Config, run: _run_folder.RunOptions, *, quick: bool = False) -> Result:
    """Trains, evaluates and logs one run; the caller's global RNG state is left as it was.

    Args:
        cfg (Config): hyperparameters.
        run (RunOptions): run folder, logger, checkpoint period, device, resume.
        quick (bool, optional): check shapes, masks and finite losses on every batch.
            Defaults to ``False``.
    """
    return _common.seeded(cfg.seed, _train, cfg, run, quick)


def _train(cfg: Config, run: _run_folder.RunOptions, quick: bool) -> Result:
    device = _common.device(run.device)
    watch = _common.Stopwatch()
    env = make_env(cfg, cfg.num_envs, cfg.seed, device)
    actor, critic = make_agent(cfg, env.observation_spec["observation"].shape[-1])
    actor, critic = actor.to(device), critic.to(device)
    loss = make_loss(cfg, actor, critic)
    optim = make_optimizer(cfg, loss)
    initial_evaluation = evaluate(cfg, actor, device)
    collector = _common.collector(env, actor, cfg, device)
    tracker = EpisodeTracker(cfg.num_envs)
    checkpoints = _checkpointing.Checkpoints(run, cfg, loss, optim, env, collector)
    logger, generator = checkpoints.logger, checkpoints.generator
    counters, state = checkpoints.start(
        frames=0, seconds=0.0, recent=[], curve=[], fresh_episodes=0
    )
    if run.resume:
        vars(tracker).update(state["tracker"])
        initial_evaluation = counters["initial_evaluation"]
    recent = deque(counters["recent"], maxlen=cfg.return_window)
    frames, curve = counters["frames"], counters["curve"]
    fresh_episodes, seconds = counters["fresh_episodes"], counters["seconds"]
    bar = _run_folder.progress_bar(cfg.frames, frames, run)
    start = time.perf_counter() - seconds

    def save(counters: dict[str, Any]) -> None:
        checkpoints.save(counters, tracker=dict(vars(tracker)))

    for batch in _ppo.gae_batches(collector, loss, watch, frames, cfg.frames):
        if quick:
            check_batch(cfg, batch, first=frames == 0)
        fresh = [e for e in tracker.update(batch.cpu()) if e["fresh"]]
        recent.extend(fresh)
        fresh_episodes += len(fresh)
        left = anneal(cfg, loss, optim, frames)
        previous, frames = frames, frames + batch.numel()
        with watch("update"):
            losses = update(cfg, batch, loss, optim, generator)
        if quick:
            assert all(math.isfinite(v) for v in losses.values()), losses
        seconds = time.perf_counter() - start
        means = window_means(recent)
        curve.append({"frames": frames, "seconds": seconds, **means})
        row = {
            **{f"mean_{k}": v for k, v in means.items()},
            "episodes_in_window": len(recent),
            "fresh_episodes": fresh_episodes,
            "lr": cfg.lr * left,
            "clip": cfg.clip * left,
            **losses,
        }
        _run_folder.log_row(logger, {**row, "seconds": seconds}, frames)
        bar.update(batch.numel())
        bar.set_postfix(mean_return=f"{means['return']:.2f}")
        counters = {
            "frames": frames,
            "seconds": seconds,
            "recent": list(recent),
            "curve": curve,
            "fresh_episodes": fresh_episodes,
            "initial_evaluation": initial_evaluation,
        }
        if _run_folder.save_due(frames, previous, run, cfg.frames):
            save(counters)
    bar.close()
    evaluation = evaluate(cfg, actor, device)
    _run_folder.log_row(logger, {f"eval_{k}": v for k, v in evaluation.items()}, frames)
    save({**counters, "evaluated": True})
    collector.shutdown()
    plot_curves(run.out / "learning_curve.png", {f"seed {cfg.seed}": curve}, PLOT_TITLE)
    return Result(
        config=cfg,
        frames=frames,
        seconds=seconds,
        curve=curve,
        episodes=fresh_episodes,
        evaluation=evaluation,
        initial_evaluation=initial_evaluation,
        timings=dict(watch.totals),
        out=run.out,
    )


# ---------------------------------------------------------------------------- command line
def first_and_last(result: Result) -> tuple[dict, dict]:
    """Window means after the first batch that completed a fresh-course episode, and at the end."""
    seen = [row for row in result.curve if not math.isnan(row["return"])]
    if not seen:
        nan = dict.fromkeys(_METRICS, float("nan"))
        return nan, nan
    return seen[0], seen[-1]


def summary(result: Result) -> str:
    """A few lines describing a run."""
    first, last = first_and_last(result)
    ev = result.evaluation

    def fmt(row: dict[str, float]) -> str:
        return (
            f"return {row['return']:.2f}, checkpoints {row['checkpoints']:.2f}, "
            f"laps finished {100 * row['finished']:.0f} %, length {row['length']:.0f} steps"
        )

    lines = [
        f"seed {result.config.seed}: {result.frames} frames in {result.seconds:.1f} s, "
        f"{result.episodes} episodes on fresh courses",
        f"  first window: {fmt(first)}",
        f"  last window:  {fmt(last)}",
        f"  deterministic on {result.config.eval_episodes} unseen courses, before training: "
        f"{fmt(result.initial_evaluation)}",
        f"  deterministic on {result.config.eval_episodes} unseen courses, after training:  "
        f"{fmt(ev)}",
    ]
    lines.append(time_line(result))
    lines.append(f"log: {result.out}")
    return "\n".join(lines)


def time_line(result: Result) -> str:
    """Where the training time went, and the collection rate (policy included).

    Examples:
        >>> result = Result(Config(), 1000, 2.0, [], 0, {}, {},
        ...                 {"collect": 0.5, "gae": 0.25, "update": 1.0})
        >>> time_line(result)
        'time: collection 0.5 s (2,000 env steps/s, policy included), GAE 0.2 s, PPO update 1.0 s'
    """
    t = result.timings
    rate = result.frames / max(t.get("collect", 0.0), 1e-9)
    return (
        f"time: collection {t.get('collect', 0.0):.1f} s ({rate:,.0f} env steps/s, policy "
        f"included), GAE {t.get('gae', 0.0):.1f} s, PPO update {t.get('update', 0.0):.1f} s"
    )


def main(args: argparse.Namespace) -> list[Result]:
    """Runs ``python -m torchrl_ext.examples course`` (see ``--help``); one result per seed."""
    results = _common.train_seeds(args, args.pipeline, train, summary, Config, QUICK)
    if len(results) > 1:
        curves = {f"seed {r.config.seed}": r.curve for r in results}
        path = plot_curves(results[0].out.parent / "learning_curves.png", curves, PLOT_TITLE)
        print(f"all seeds: {path}")
    return results
