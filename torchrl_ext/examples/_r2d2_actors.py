"""The actors of the distributed R2D2 example and what the learner reads of them.

What runs in the Ray workers (their envs, policy, episode-return hook) and the collector that
starts them; the background threads that push weights and read counters (``_Actors``), and the
rates between two reads (:class:`Snapshot`, :class:`Rates`).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from functools import partial
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictSequential
from torch import nn
from torchrl.modules import EGreedyModule, QValueModule

from torchrl_ext.examples import _common
from torchrl_ext.examples import r2d2_cartpole as single
from torchrl_ext.examples._r2d2_layout import TIMEOUT, Layout

#: What the actors write of each collected record (the trajectory ids are what
#: ``trajs_per_batch`` assembles whole episodes from; the return feeds the progress display).
WRITTEN = (*single.STORED, ("next", "episode_reward"), ("collector", "traj_ids"))


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
