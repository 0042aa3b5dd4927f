"""R2D2 on partially observable CartPole in the Ape-X layout: Ray actors, replay service, learner.

Run it with ``python -m torchrl_ext.examples r2d2 --distributed [--workers N] [--address ADDR]``.

The same agent, loss and hyperparameters as :mod:`~torchrl_ext.examples.r2d2_cartpole` (its
builders are imported, not copied), laid out as in Ape-X and R2D2:

1. **Actors**: torchrl's :class:`~torchrl.collectors.distributed.RayCollector` starts ``N``
   remote collectors. Each builds its own batch of Warp ``CartPoleEnv`` from a constructor
   inside its Ray worker, acts with the learner's Q-network through ``EGreedyModule`` and
   writes whole trajectories straight into the replay service (``trajs_per_batch``).
2. **Exploration**: the Ape-X ladder over every env of every worker. Env ``j`` of all ``M``
   envs explores at least ``eps_lanes ** (1 + 2 j / (M - 1))`` (the single-process example's
   :func:`~torchrl_ext.examples.r2d2_cartpole.epsilons` over ``M`` lanes), after the same
   linear decay from 1; worker ``i`` holds lanes ``i * num_envs`` to ``(i + 1) * num_envs - 1``,
   so worker 0 explores most, as Ape-X's actor 0 does. The ladder keeps the single-process
   base 0.1 and exponent 2 rather than Ape-X's 0.4 and 7: the target is a mean return over the
   actors' own episodes, which a lane acting 40 % at random would hold down.
3. **Replay**: one Ray actor serving :func:`~torchrl_ext.distributed.prioritized_ray_buffer`
   with the example's :class:`~torchrl_ext.data.Sequence` unit over a
   :class:`~torchrl_ext.data.FastLazyTensorStorage`.
4. **Learner** (this process): ``R2D2Loss``, ``HardUpdate`` target copies, priorities written
   back per anchor with ``unit.update_priority(rb, sample)``. The next sample is requested
   while the current one trains, so the Ray round trip overlaps the update.
5. **Weights**: every ``weight_period`` updates the learner's weights, with each worker's
   exploration rates, go to the workers (``update_policy_weights_``) from a background thread,
   so the learner never waits for an actor to finish its batch.

Actors and learner run concurrently: the collector is iterated in a background thread. They
keep the single-process example's replay ratio, one update per ``frames_per_update`` collected
frames: the learner waits for frames when it is ahead, and once it has started, the actors wait
when they are more than two rounds of batches ahead. With the learning rate scheduled over
frames, that keeps the learning per frame the single-process example's.

Every ``--save-every`` frames the run saves the networks, the optimizer, the counters and the
replay service (``rb.dumps``); ``--resume DIR`` reloads them and starts fresh actors (the
episodes they were playing are lost). Actors and learner run concurrently, so a distributed
run is not reproducible bit for bit: the envs are seeded (worker ``i`` with
``seed + 7919 * i``) and so is the learner's initialization, but the timing decides which
weights act and what the learner samples.

This module runs the learner's loop, its checkpoints and the command line. The actors (1, 2, 5)
and what the learner reads of them live in ``_r2d2_actors``, the learner's replay service and
update (3, 4) in ``_r2d2_learner``, :class:`Layout` and ``TIMEOUT`` in ``_r2d2_layout``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import time
from functools import partial
from pathlib import Path
from typing import Any

import torch
from tensordict.nn import TensorDictSequential

from torchrl_ext.examples import _checkpointing, _common, _configs, _run_folder
from torchrl_ext.examples import r2d2_cartpole as single
from torchrl_ext.examples._r2d2_actors import EpisodeReturns as EpisodeReturns
from torchrl_ext.examples._r2d2_actors import (
    Rates,
    Snapshot,
    _Actors,
    lane_epsilons,
    make_collector,
    make_policy,
)
from torchrl_ext.examples._r2d2_layout import TIMEOUT, Layout, parse_address
from torchrl_ext.examples._r2d2_learner import _Learner


def train(
    cfg: single.Config, layout: Layout, run: _run_folder.RunOptions, *, quick: bool = False
) -> single.Result:
    """Trains one seed on the running Ray; see the module docstring. Global RNG state is kept."""
    return _common.seeded(cfg.seed, _train, cfg, layout, run, quick)


def _train(cfg: single.Config, layout: Layout, run: _run_folder.RunOptions, quick: bool):
    device = _common.device(run.device)
    policy = make_policy(cfg, device)
    learner = _Learner(cfg, policy[0], device)
    logger = _run_folder.make_logger(run.logger, run.out, run.resume)
    counters = {"frames": 0, "updates": 0, "seconds": 0.0, "hit": None, "recent": []}
    if run.resume:
        counters = _restore(run, learner, logger)
    window = _common.ReturnWindow(
        cfg.return_window, cfg.target, counters["recent"], counters["hit"]
    )
    actor_policy = policy if device.type == "cpu" else make_policy(cfg, torch.device("cpu"))
    actors = _Actors(make_collector(cfg, layout, actor_policy, learner.rb), learner.rb, cfg, layout)
    try:
        actors.start(policy, counters["frames"])
        counters = _loop(cfg, layout, run, quick, policy, learner, actors, logger, counters, window)
        greedy = TensorDictSequential(policy[0], policy[1])
        final_eval = single.evaluate(cfg, greedy, device)
        frames = counters["frames"]
        logger.log_scalar("final_eval", final_eval, step=frames)
        _save(run, cfg, layout, {**counters, "evaluated": True}, learner, logger)
    finally:
        actors.stop()
        learner.close()
    seconds, lowest = counters["seconds"], single.lowest_after(run, window.hit)
    return single.Result.of(
        cfg, window, final_eval, frames, seconds, run.out, lowest_after_target=lowest
    )


def _loop(
    cfg, layout, run, quick, policy, learner, actors, logger, counters, window: _common.ReturnWindow
) -> dict[str, Any]:
    """Learns until the actors have stepped ``cfg.frames`` frames; logs each new snapshot."""
    frames, updates = counters["frames"], counters["updates"]
    rates, logged, saved = Rates(actors.snapshot, updates), actors.snapshot, frames
    start, loss = time.perf_counter() - counters["seconds"], math.nan
    bar = _run_folder.progress_bar(cfg.frames, frames, run)

    def log(snapshot: Snapshot, before: Snapshot) -> float:
        """Logs a row for ``snapshot``, with the episodes finished since ``before``."""
        seconds = time.perf_counter() - start
        mean_return = window.update(snapshot.returns_since(before), frames, seconds)
        eps = float(lane_epsilons(cfg, layout.workers, frames).mean())
        row = {
            "mean_return": mean_return,
            "loss": loss,
            "updates": updates,
            "lr": learner.optim.param_groups[0]["lr"],
            "epsilon": eps,
            "seconds": seconds,
            **rates.step(snapshot, updates, cfg.batch_size),
        }
        _run_folder.log_row(logger, row, frames)
        bar.set_postfix_str(progress_text(row), refresh=False)
        bar.update(min(frames, cfg.frames) - bar.n)
        return seconds

    while frames < cfg.frames or (quick and updates < QUICK_UPDATES):
        actors.check()
        frames, snapshot = max(frames, actors.frames), actors.snapshot
        if snapshot is not logged:
            logged, seconds = snapshot, log(snapshot, logged)
            if _run_folder.due(frames, saved, run.save_every) or _run_folder.stop_requested():
                _save(
                    run, cfg, layout, _counters(frames, updates, seconds, window), learner, logger
                )
                saved = frames
        elif time.perf_counter() - snapshot.time > TIMEOUT:
            raise TimeoutError(f"the actors have not answered for {TIMEOUT:.0f} s.")
        if not _may_update(cfg, layout, frames, updates, snapshot):
            time.sleep(0.005)
            continue
        sample, out = learner.update(frames)
        updates, loss = updates + 1, float(out["loss"].detach())
        actors.updates = updates
        if quick:
            single.check_sample(cfg, sample, out)
        if updates % layout.weight_period == 0:
            actors.push(policy)
    seconds = log(actors.read(), logged)  # the last row: the counters as the run ends
    bar.close()
    counters = _counters(frames, updates, seconds, window)
    _save(run, cfg, layout, counters, learner, logger)
    return counters


def _may_update(
    cfg: single.Config, layout: Layout, frames: int, updates: int, snapshot: Snapshot
) -> bool:
    """After the warm-up, at most one update per ``layout.frames_per_update`` frames.

    Examples:
        >>> cfg, layout = single.Config(warmup_frames=100, batch_size=1), Layout()
        >>> snapshot = Snapshot([], inserted=10**6, time=0.0)
        >>> [_may_update(cfg, layout, 100 + 64 * k, 2, snapshot) for k in (0, 1, 2)]
        [False, False, True]
    """
    return (
        frames >= cfg.warmup_frames
        and snapshot.inserted >= cfg.batch_size * cfg.window
        and updates <= (frames - cfg.warmup_frames) // layout.frames_per_update
    )


def progress_text(row: dict[str, float]) -> str:
    """The progress bar's postfix: return, loss and every rate of ``row``.

    Examples:
        >>> progress_text({"mean_return": 21.5, "loss": 0.25, "worker0_frames_per_s": 2500.0,
        ...                "inserts_per_s": 2400.0, "samples_per_s": 640.0, "updates_per_s": 20.0})
        'ret=22 loss=0.250 w0=2.5k fr/s ins=2.4k/s smp=640/s upd=20.0/s'
    """
    workers = [f"w{k[6:-13]}={row[k] / 1e3:.1f}k fr/s" for k in row if k.endswith("frames_per_s")]
    return " ".join(
        [
            f"ret={row['mean_return']:.0f}",
            f"loss={row['loss']:.3f}",
            *workers,
            f"ins={row['inserts_per_s'] / 1e3:.1f}k/s",
            f"smp={row['samples_per_s']:.0f}/s",
            f"upd={row['updates_per_s']:.1f}/s",
        ]
    )


def _counters(frames, updates, seconds, window: _common.ReturnWindow) -> dict[str, Any]:
    return {
        "frames": frames,
        "updates": updates,
        "seconds": seconds,
        "hit": window.hit,
        "recent": list(window.recent),
    }


# ---------------------------------------------------------------------------- checkpoints
def _save(run, cfg, layout, counters, learner: _Learner, logger) -> None:
    """The learner's state, and the replay service's (``rb.dumps``) in the same checkpoint."""

    def dump_replay(path: Path) -> None:
        learner.call("dumps", str(path.resolve()))

    _checkpointing.save_log(
        run,
        cfg,
        counters,
        logger,
        layout=dataclasses.asdict(layout),
        files={"replay": dump_replay},
        **learner.state_dict(),
    )


def _restore(run, learner: _Learner, logger) -> dict[str, Any]:
    folder = _run_folder.find_checkpoint(run.out)
    state = _run_folder.load_checkpoint(folder)
    learner.load_state_dict(state)
    learner.call("loads", str(folder.resolve() / "replay"))
    return _checkpointing.restore_log(run, state, logger)


# ---------------------------------------------------------------------------- command line
#: ``--quick``: a short run (overrides of the example's ``Config``) with checked samples; in the
#: torch-free ``_configs``, so that the command line checks the config before importing this.
QUICK = _configs.R2D2_DISTRIBUTED_QUICK
#: Actor workers without ``--workers`` (fewer on a cluster with fewer CPUs).
DEFAULT_WORKERS = 2
#: ``--quick`` runs at least this many checked updates.
QUICK_UPDATES = 4


def default_workers(cpus: float) -> int:
    """``DEFAULT_WORKERS``, or as many as the cluster's ``cpus`` allow (at least one).

    Examples:
        >>> default_workers(16.0), default_workers(1.0)
        (2, 1)
    """
    return max(1, min(DEFAULT_WORKERS, int(cpus)))


def start_ray(address: str | None) -> bool:
    """Starts a local Ray (one CPU per core) or joins ``address``; returns whether it did.

    A Ray already running in this process is used as it is.
    """
    import ray

    if ray.is_initialized():
        return False
    common = {"include_dashboard": False, "log_to_driver": False}
    if address is None:
        ray.init(num_cpus=os.cpu_count(), **common)
    else:
        ray.init(address=address, **common)
    return True


def check_cpus(workers: int) -> None:
    """Stops the run unless the running Ray has a CPU for each of ``workers``."""
    import ray

    cpus = ray.cluster_resources().get("CPU", 0)
    if cpus < workers:
        raise SystemExit(
            f"--workers {workers}: the Ray cluster has {cpus:g} CPUs and each worker takes one; "
            "pass fewer workers or join a larger cluster with --address."
        )


def main(args: argparse.Namespace) -> list[single.Result]:
    """Runs ``python -m torchrl_ext.examples r2d2 --distributed`` (see ``--help``)."""
    try:
        workers = 1 if args.workers is None else args.workers
        address = None if args.address is None else parse_address(args.address)
        layout = Layout(workers=workers, address=address)
    except (TypeError, ValueError, argparse.ArgumentTypeError) as error:
        raise SystemExit(f"r2d2 --distributed: {error}") from None
    import ray

    started = start_ray(layout.address)
    try:
        if args.workers is None:
            cpus = ray.cluster_resources().get("CPU", 0)
            layout = dataclasses.replace(layout, workers=default_workers(cpus))
        results = _common.train_seeds(
            args, args.pipeline, partial(train_run, layout), summary, single.Config, QUICK
        )
    finally:
        if started:
            ray.shutdown()
    if len(results) > 1:
        print(single.table(results))
    return results


def train_run(
    layout: Layout, cfg: single.Config, run: _run_folder.RunOptions, *, quick: bool = False
) -> single.Result:
    """:func:`train` with ``layout``, or for a resumed run the saved one on ``layout``'s Ray."""
    if run.resume:
        saved = _run_folder.load_checkpoint(_run_folder.find_checkpoint(run.out))["layout"]
        layout = Layout(**{**saved, "address": layout.address})
    check_cpus(layout.workers)
    return train(cfg, layout, run, quick=quick)


def summary(result: single.Result) -> str:
    """The single-process example's line, named ``r2d2 --distributed``."""
    return single.summary(result, command="r2d2 --distributed")
