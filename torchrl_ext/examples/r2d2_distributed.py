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
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import math
import os
import threading
import time
from collections import deque
from functools import partial
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictSequential
from torch import nn
from torchrl.modules import EGreedyModule, QValueModule
from torchrl.objectives import HardUpdate

from torchrl_ext._checks import check_int
from torchrl_ext.examples import _checkpointing, _common, _run_folder
from torchrl_ext.examples import r2d2_cartpole as single
from torchrl_ext.objectives import R2D2Loss

#: Seconds any single call to a Ray actor may take before the run stops with an error.
TIMEOUT = 120.0
#: What the actors write of each collected record (the trajectory ids are what
#: ``trajs_per_batch`` assembles whole episodes from; the return feeds the progress display).
WRITTEN = (*single.STORED, ("next", "episode_reward"), ("collector", "traj_ids"))


@dataclasses.dataclass
class Layout:
    """Where the run's pieces go and how they pace each other.

    Args:
        workers (int): Ray actors, each a remote collector with ``Config.num_envs`` envs.
        address (str or None): a Ray cluster to join (``ray start --head`` prints it);
            ``None`` starts a local Ray with one CPU per core.
        steps (int): steps per env in one actor batch (``num_envs * steps`` frames per write
            round trip).
        weight_period (int): learner updates between two weight pushes to the actors.
        frames_per_update (int): collected frames per learner update (the single-process
            example's replay ratio); the side that runs ahead of it waits.
        stats_period (float): seconds between two reads of the actors' counters.

    Examples:
        >>> Layout(workers=2).workers
        2
    """

    workers: int = 1
    address: str | None = None
    steps: int = 16
    weight_period: int = 4
    frames_per_update: int = 64
    stats_period: float = 0.5

    def __post_init__(self) -> None:
        self.workers = check_int("workers", self.workers, minimum=1)
        self.steps = check_int("steps", self.steps, minimum=1)
        self.weight_period = check_int("weight_period", self.weight_period, minimum=1)
        self.frames_per_update = check_int("frames_per_update", self.frames_per_update, 1)
        if self.address is not None and not (isinstance(self.address, str) and self.address):
            raise ValueError(
                f"address must be a Ray address such as 'auto' or '10.0.0.1:6379', "
                f"got address={self.address!r}."
            )


def parse_address(text: str) -> str:
    """Checks a ``--address`` value: ``auto``, ``HOST:PORT`` or ``ray://HOST:PORT``.

    Examples:
        >>> parse_address("10.0.0.1:6379"), parse_address("auto")
        ('10.0.0.1:6379', 'auto')
        >>> parse_address("10.0.0.1")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: --address must be 'auto', HOST:PORT or ray://HOST:PORT ...
    """
    if text == "auto":
        return text
    host, sep, port = text.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(
            "--address must be 'auto', HOST:PORT or ray://HOST:PORT (the address "
            f"`ray start --head` prints), got {text!r}."
        )
    return text


# ---------------------------------------------------------------------------- actors
class EpisodeReturns:
    """A collector's ``post_collect_hook`` that keeps the returns of its finished episodes.

    It lives in the Ray worker; the learner reads it back with the collector's
    ``get_distant_attr("post_collect_hook")``: ``frames`` stepped and ``count`` episodes
    finished so far, the latest ``window`` returns in ``recent``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> hook = EpisodeReturns(window=2)
        >>> done = torch.tensor([[False], [True], [True], [True]])
        >>> ret = torch.tensor([[1.0], [2.0], [3.0], [4.0]])
        >>> hook(TensorDict({("next", "done"): done, ("next", "episode_reward"): ret}, [4]))
        >>> hook.frames, hook.count, list(hook.recent)
        (4, 3, [3.0, 4.0])
    """

    def __init__(self, window: int) -> None:
        self.frames = 0
        self.count = 0
        self.recent: deque[float] = deque(maxlen=window)

    def __call__(self, batch: TensorDictBase) -> None:
        """Counts the frames of ``batch`` and records the returns of the episodes ending there."""
        returns = _common.completed_returns(batch).tolist()
        self.frames += batch.numel()
        self.count += len(returns)
        self.recent.extend(returns)


def lane_epsilons(cfg: single.Config, workers: int, frames: int) -> torch.Tensor:
    """Exploration rates ``[workers, num_envs]``: the example's ladder over every env.

    Examples:
        >>> cfg = single.Config(num_envs=2, eps_end=0.0, eps_lanes=0.1)
        >>> lane_epsilons(cfg, workers=2, frames=10**9).log10().round().tolist()
        [[-1.0, -2.0], [-2.0, -3.0]]
    """
    every_env = dataclasses.replace(cfg, num_envs=workers * cfg.num_envs)
    return single.epsilons(every_env, frames).reshape(workers, cfg.num_envs)


def make_policy(cfg: single.Config, device: torch.device) -> TensorDictSequential:
    """Q-network, greedy action, one exploration rate per env (set by the learner)."""
    env = single.make_env(cfg, cfg.num_envs, 0, torch.device("cpu"))
    qnet = single.make_qnet(cfg).to(device)
    egreedy = EGreedyModule(env.action_spec, eps_init=1.0, eps_end=cfg.eps_end)
    env.close()
    egreedy.eps = torch.ones(cfg.num_envs)
    return TensorDictSequential(qnet, QValueModule(action_space="categorical"), egreedy.to(device))


def worker_env(cfg: single.Config, seed: int) -> Any:
    """Runs in the Ray worker: builds its envs there (Warp kernels compile or load there)."""
    torch.set_num_threads(1)
    return single.make_env(cfg, cfg.num_envs, seed, torch.device("cpu"))


def written(batch: TensorDictBase) -> TensorDictBase:
    """The inner collectors' ``postproc``: what the replay stores of a batch."""
    return batch.select(*WRITTEN)


def make_collector(cfg: single.Config, layout: Layout, policy: Any, rb: Any) -> Any:
    """``layout.workers`` remote collectors writing whole trajectories into ``rb``."""
    from torchrl.collectors.distributed import RayCollector

    n = layout.workers
    return RayCollector(
        [partial(worker_env, cfg, cfg.seed + 7919 * i) for i in range(n)],
        policy=policy,
        frames_per_batch=cfg.num_envs * layout.steps,
        total_frames=2**62,  # the learner decides when to stop
        replay_buffer=rb,
        trajs_per_batch=1,
        collector_kwargs=[
            {"postproc": written, "post_collect_hook": EpisodeReturns(cfg.return_window)}
            for _ in range(n)
        ],
        remote_configs={"num_cpus": 1},
    )


# ---------------------------------------------------------------------------- the actors' side
@dataclasses.dataclass
class Snapshot:
    """What the service thread last read: each worker's hook, the replay's writes, the time.

    Examples:
        >>> Snapshot([EpisodeReturns(window=4)], inserted=0, time=0.0).hooks[0].count
        0
    """

    hooks: list[EpisodeReturns]
    inserted: int
    time: float

    def returns_since(self, before: Snapshot) -> list[float]:
        """Returns of the episodes each worker finished after ``before``, worker by worker.

        A hook keeps its latest ``window`` returns: episodes that fell out of it between the two
        reads are not counted.

        Examples:
            >>> before = Snapshot([EpisodeReturns(2), EpisodeReturns(2)], inserted=0, time=0.0)
            >>> a, b = EpisodeReturns(window=2), EpisodeReturns(window=2)  # a later read
            >>> a.count, a.recent, b.count, b.recent = 3, [2.0, 3.0], 1, [10.0]
            >>> Snapshot([a, b], inserted=0, time=1.0).returns_since(before)  # a's first is lost
            [2.0, 3.0, 10.0]
        """
        returns = []
        for hook, old in zip(self.hooks, before.hooks, strict=True):
            kept = list(hook.recent)
            returns += kept[len(kept) - min(hook.count - old.count, len(kept)) :]
        return returns


class _Actors:
    """The collector iterated in one background thread; weights and counters in another.

    The collecting thread only iterates the collector (the workers write into the replay
    themselves) and counts ``frames``; once the learner has reported ``updates``, it stops
    asking for batches while ``frames`` is more than two rounds of batches beyond the
    replay ratio (the workers then leave their CPU to the learner). The service thread sends
    the weights handed to :meth:`push` to each worker with its exploration rates and, every
    ``layout.stats_period`` seconds, reads the workers' :class:`EpisodeReturns` and the
    replay's write count into ``snapshot``. Calls to a worker wait for its current batch, so
    neither thread is the learner's.
    """

    def __init__(self, collector: Any, rb: Any, cfg: single.Config, layout: Layout) -> None:
        self.collector, self.rb, self.cfg, self.layout = collector, rb, cfg, layout
        self.frames = 0
        self.updates = 0  # set by the learner
        self.snapshot: Snapshot | None = None
        self.error: BaseException | None = None
        self._latest: TensorDictBase | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._guard, args=(self._collect,), daemon=True),
            threading.Thread(target=self._guard, args=(self._serve,), daemon=True),
        ]

    def start(self, policy: nn.Module, frames: int) -> None:
        """Sends the first weights, then starts both threads, counting from ``frames``."""
        self.frames = frames
        self._send(_weights(policy))
        self.snapshot = self.read()
        for thread in self._threads:
            thread.start()

    def push(self, policy: nn.Module) -> None:
        """Queues a copy of the current weights; a newer push replaces one not yet sent."""
        self._latest = _weights(policy)
        self._wake.set()

    def check(self) -> None:
        """Raises the error a background thread stopped on, if any."""
        if self.error is not None:
            raise RuntimeError("an actor-side thread failed (the cause follows)") from self.error

    def stop(self) -> None:
        """Stops both threads and the remote collectors."""
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout=TIMEOUT)
        self.collector.shutdown(timeout=TIMEOUT)

    def _guard(self, body: Any) -> None:
        try:
            body()
        except BaseException as error:  # raised in the learner's thread by check()
            self.error = error

    def _collect(self) -> None:
        lead = 2 * self.layout.workers * self.collector.frames_per_batch
        for _ in self.collector:  # each step: one worker wrote its batch into the replay
            self.frames += self.collector.frames_per_batch
            while self.updates and not self._stop.is_set():
                ratio = self.cfg.warmup_frames + self.updates * self.layout.frames_per_update
                if self.frames < ratio + lead:
                    break
                time.sleep(0.002)
            if self._stop.is_set():
                return

    def _serve(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(timeout=self.layout.stats_period)
            self._wake.clear()
            weights, self._latest = self._latest, None
            if weights is not None:
                self._send(weights)
            if time.perf_counter() - self.snapshot.time >= self.layout.stats_period:
                self.snapshot = self.read()

    def _send(self, weights: TensorDictBase) -> None:
        eps = lane_epsilons(self.cfg, self.layout.workers, self.frames)
        for i in range(self.layout.workers):
            weights["module", "2", "eps"] = eps[i]
            self.collector.update_policy_weights_(weights, worker_ids=i)

    def read(self) -> Snapshot:
        """Reads the workers' hooks and the replay's write count (waits for their batches)."""
        import ray

        workers = self.collector.remote_collectors
        calls = [w.get_distant_attr.remote("post_collect_hook") for w in workers]
        hooks = ray.get(calls, timeout=TIMEOUT)
        return Snapshot(hooks, self.rb.stats()["write_count"], time.perf_counter())


def _weights(policy: nn.Module) -> TensorDictBase:
    """A CPU copy of the policy's parameters and buffers, safe to send while training goes on."""
    return TensorDict.from_module(policy).data.apply(lambda t: t.to("cpu", copy=True))


# ---------------------------------------------------------------------------- the learner's side
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


class Rates:
    """Per-second rates between two :class:`Snapshot` reads, as the logs and the bar show them.

    Examples:
        >>> hook = EpisodeReturns(4)
        >>> rates = Rates(Snapshot([hook], inserted=0, time=0.0), updates=0)
        >>> hook.frames = 500
        >>> rates.step(Snapshot([hook], inserted=300, time=0.5), updates=10, batch_size=32)
        ... # doctest: +NORMALIZE_WHITESPACE
        {'worker0_frames_per_s': 1000.0, 'inserts_per_s': 600.0, 'samples_per_s': 640.0,
         'updates_per_s': 20.0}
    """

    def __init__(self, snapshot: Snapshot, updates: int) -> None:
        self._frames = [hook.frames for hook in snapshot.hooks]
        self._inserted, self._time, self._updates = snapshot.inserted, snapshot.time, updates

    def step(self, snapshot: Snapshot, updates: int, batch_size: int) -> dict[str, float]:
        """The rates since the previous call (or construction); ``updates`` is the learner's."""
        dt = max(snapshot.time - self._time, 1e-9)
        frames = [hook.frames for hook in snapshot.hooks]
        pairs = enumerate(zip(frames, self._frames, strict=True))
        rates = {f"worker{i}_frames_per_s": (new - old) / dt for i, (new, old) in pairs}
        rates["inserts_per_s"] = (snapshot.inserted - self._inserted) / dt
        rates["samples_per_s"] = (updates - self._updates) * batch_size / dt
        rates["updates_per_s"] = (updates - self._updates) / dt
        self._frames, self._inserted = frames, snapshot.inserted
        self._time, self._updates = snapshot.time, updates
        return rates


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
        self.optim = torch.optim.Adam(list(params), lr=cfg.lr)
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
#: ``--quick``: a short run (overrides of the example's ``Config``) with checked samples.
QUICK = {
    "frames": 2048,
    "warmup_frames": 512,
    "capacity": 4096,
    "batch_size": 8,
    "eval_episodes": 2,
}
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
