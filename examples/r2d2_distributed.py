"""R2D2 on CartPole without velocities in the Ape-X layout on Ray: actors, replay service, learner.

    python examples/r2d2_distributed.py [--workers N] [--address HOST:PORT] [--frames N] [--quick]

The agent, loss and hyperparameters of ``r2d2_cartpole.py``, laid out as in Ape-X and R2D2 (it
needs Ray: ``pip install ray``):

1. Actors: TorchRL's ``RayCollector`` starts ``workers`` remote collectors, one CPU each. Each
   builds its own batch of Warp ``CartPoleEnv`` inside its Ray worker, acts with the learner's
   Q-network through ``EGreedyModule`` and writes whole trajectories straight into the replay
   service.
2. Exploration: the Ape-X ladder over every env of every worker (``epsilons``); worker ``i``
   holds lanes ``i * num_envs`` to ``(i + 1) * num_envs - 1``, so worker 0 explores most. The
   ladder keeps the single-process base and exponent rather than Ape-X's 0.4 and 7: the mean
   return is over the actors' own episodes, which a lane acting 40 % at random would hold down.
3. Replay: one Ray actor serving ``torchrl_ext.distributed.prioritized_ray_buffer`` with R2D2's
   ``Sequence`` sample unit (burn-in, learning and bootstrap windows).
4. Learner (this process): ``R2D2Loss``, ``HardUpdate`` target copies, one priority per anchor
   written back; the next sample is on its way while the current one trains.
5. Weights: every ``weight_period`` updates the learner's weights, with each worker's
   exploration rates, go to the workers from a background thread.

Actors and learner run concurrently at the single-process replay ratio, one update per
``frames_per_update`` collected frames: the learner waits for frames when it is ahead, the
actors wait when they are more than two rounds of batches ahead. A checkpoint holds the
networks, the optimizer, the counters and the replay service's folder (``rb.dumps``, checked to
be data before it is read back); ``--resume`` starts fresh actors. The timing decides which
weights act and what the learner samples, so a run is not reproducible bit for bit.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import math
import os
import sys
import threading
import time
from collections import deque
from functools import partial
from typing import Any

import runs
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.envs import Compose, InitTracker, ObservationNorm, RewardSum, TransformedEnv
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import EGreedyModule, QValueModule
from torchrl.objectives import HardUpdate

from torchrl_ext.data import Sequence
from torchrl_ext.data.safe_loading import check_replay_folder
from torchrl_ext.envs import CartPoleEnv
from torchrl_ext.modules import LSTMModule
from torchrl_ext.objectives import R2D2Loss


@dataclasses.dataclass
class Args:
    """The run's arguments: each field is an option (``--workers 4``)."""

    seed: int = 0
    """seed of the network initialization and the envs (worker i: seed + 7919 i)"""
    frames: int = 400_000
    """frames the actors collect; the exploration and learning-rate schedules run over them"""
    workers: int = 2
    """Ray actor workers, each a remote collector with num_envs envs and one CPU"""
    address: str = ""
    """Ray cluster to join (auto, HOST:PORT or ray://HOST:PORT); empty: $RAY_ADDRESS if set,
    else a local Ray with one CPU per core"""
    num_envs: int = 16
    """envs per worker"""
    steps: int = 16
    """steps per env in one actor batch (a worker writes num_envs * steps frames at a time)"""
    frames_per_update: int = 64
    """collected frames per learner update (the replay ratio); the side ahead waits"""
    weight_period: int = 4
    """learner updates between two weight pushes to the workers"""
    stats_period: float = 0.5
    """seconds between two reads of the workers' counters (a log row each)"""
    hidden: int = 64
    """width of the embedding, the LSTM and the head"""
    lr: float = 5e-4
    """Adam learning rate (constant for the first lr_decay_start of the frames)"""
    lr_end: float = 5e-5
    """learning rate at the end of the frames"""
    lr_decay_start: float = 0.5
    """fraction of the frames after which the learning rate decays linearly to lr_end"""
    gamma: float = 0.98
    """discount"""
    max_grad_norm: float = 10.0
    """gradient-norm clip"""
    warmup_frames: int = 2_048
    """frames collected before the first update"""
    capacity: int = 100_000
    """replay capacity in records"""
    burn_in: int = 8
    """burn-in records per window (no gradient; they rebuild the LSTM state)"""
    length: int = 16
    """learning records per window"""
    n_step: int = 5
    """return horizon; a window carries n_step - 1 bootstrap records"""
    batch_size: int = 32
    """windows per update"""
    value_rescaling: bool = True
    """R2D2's h(x) on the targets"""
    target_period: int = 100
    """updates between two copies of the online network into the target"""
    alpha: float = 0.9
    """priority exponent"""
    beta: float = 0.6
    """importance-sampling exponent"""
    eta: float = 0.9
    """weight of the max in the per-anchor priority (max and mean of the learning records)"""
    eps_frames: int = 100_000
    """frames of linear exploration decay from 1 to eps_end"""
    eps_end: float = 0.01
    """exploration rate after the decay"""
    eps_lanes: float = 0.1
    """floor of env j of all M: eps_lanes ** (1 + 2 j / (M - 1))"""
    target: float = 400.0
    """mean return that counts as solved"""
    return_window: int = 32
    """completed episodes averaged into the mean return"""
    eval_episodes: int = 16
    """episodes of the final greedy evaluation"""

    def __post_init__(self) -> None:
        counts = ["frames", "workers", "num_envs", "steps", "frames_per_update"]
        counts += ["weight_period", "hidden", "warmup_frames", "capacity", "length", "n_step"]
        counts += ["batch_size", "target_period", "eps_frames", "return_window", "eval_episodes"]
        runs.check_fields(
            self,
            counts=counts,
            positive=["stats_period", "lr", "max_grad_norm"],
            non_negative=["lr_end", "alpha", "beta"],
            fractions=["lr_decay_start", "gamma", "eta", "eps_end", "eps_lanes"],
        )
        if isinstance(self.burn_in, bool) or not isinstance(self.burn_in, int) or self.burn_in < 0:
            raise ValueError(f"burn_in must be an integer >= 0, got burn_in={self.burn_in!r}.")
        if not math.isfinite(self.target):
            raise ValueError(f"target must be a finite number, got target={self.target!r}.")
        if self.capacity < self.window:
            raise ValueError(
                f"capacity must hold at least one window (burn_in + length + n_step - 1 = "
                f"{self.window} records), got capacity={self.capacity}."
            )
        check_address(self.address)

    @property
    def window(self) -> int:
        """Records per sampled window: burn-in, learning records and bootstrap."""
        return self.burn_in + self.length + self.n_step - 1


def check_address(address: str) -> None:
    """Refuses an ``address`` that is not empty, ``auto``, ``HOST:PORT`` or ``ray://HOST:PORT``.

    Examples:
        >>> check_address("10.0.0.1:6379"), check_address("auto"), check_address("")
        (None, None, None)
        >>> check_address("10.0.0.1")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: address must be 'auto', HOST:PORT or ray://HOST:PORT ... address='10.0.0.1'.
    """
    if address in ("", "auto"):
        return
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    if not (colon and host and port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(
            "address must be 'auto', HOST:PORT or ray://HOST:PORT (the address `ray start "
            f"--head` prints), got address={address!r}."
        )


#: What ``--quick`` changes: 2,048 frames, and at least ``QUICK_UPDATES`` checked updates.
QUICK = dict(frames=2048, warmup_frames=512, capacity=4096, batch_size=8, eval_episodes=2)
QUICK_UPDATES = 4
#: Seconds any single call to a Ray actor may take before the run stops with an error.
TIMEOUT = 120.0

STATE = ("recurrent_state_h", "recurrent_state_c")
#: Termination bounds of the observed ``(x, theta)``: the observation scale.
BOUNDS = (2.4, 12 * 2 * math.pi / 360)
#: What the actors write of each collected record: what the learner reads, and the trajectory
#: ids whole episodes are assembled from and the return the logs show.
WRITTEN = (
    "observation",
    "action",
    "is_init",
    *STATE,
    ("next", "observation"),
    ("next", "reward"),
    ("next", "done"),
    ("next", "terminated"),
    ("next", "truncated"),
    ("next", "episode_reward"),
    ("collector", "traj_ids"),
)


# ---------------------------------------------------------------------------- env and agent
def make_env(num_envs: int, seed: int, hidden: int, device) -> TransformedEnv:
    """Partially observable CartPole with reset flags, episode returns and a fixed scale.

    ``hidden`` is the width of the LSTM whose state primer the env carries.
    """
    base = CartPoleEnv(num_envs, seed=seed, observe_velocity=False, device=device)
    transforms = Compose(
        InitTracker(),
        RewardSum(),
        ObservationNorm(
            loc=torch.zeros(2), scale=1 / torch.tensor(BOUNDS), in_keys=["observation"]
        ),
        make_lstm(hidden).make_tensordict_primer(),
    )
    return TransformedEnv(base, transforms.to(device))


def make_lstm(hidden: int) -> LSTMModule:
    """The Q-network's memory; it reads and writes its state under ``STATE``."""
    return LSTMModule(
        input_size=hidden,
        hidden_size=hidden,
        in_keys=["embed", *STATE],
        out_keys=["memory", *(("next", k) for k in STATE)],
    )


def make_qnet(args: Args) -> TensorDictSequential:
    """Embedding, LSTM and head: ``observation`` (and the stored state) to ``action_value``."""
    embed = nn.Sequential(nn.Linear(2, args.hidden), nn.ReLU())
    head = nn.Sequential(nn.Linear(args.hidden, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 2))
    return TensorDictSequential(
        TensorDictModule(embed, in_keys=["observation"], out_keys=["embed"]),
        make_lstm(args.hidden),
        TensorDictModule(head, in_keys=["memory"], out_keys=["action_value"]),
    )


def make_policy(args: Args, device) -> TensorDictSequential:
    """Q-network, greedy action, one exploration rate per env (sent with the weights)."""
    qnet = make_qnet(args).to(device)
    env = make_env(args.num_envs, 0, args.hidden, torch.device("cpu"))
    egreedy = EGreedyModule(env.action_spec, eps_init=1.0, eps_end=args.eps_end)
    env.close()
    egreedy.eps = torch.ones(args.num_envs)
    return TensorDictSequential(qnet, QValueModule(action_space="categorical"), egreedy.to(device))


def epsilons(args: Args, lanes: int, frames: int) -> torch.Tensor:
    """Exploration rates of ``lanes`` envs: a linear decay from 1, floored by a per-env ladder.

    Examples:
        >>> args = Args(eps_end=0.0, eps_lanes=0.1)
        >>> [round(e, 4) for e in epsilons(args, lanes=3, frames=10**9).tolist()]
        [0.1, 0.01, 0.001]
    """
    decayed = 1.0 + min(1.0, frames / args.eps_frames) * (args.eps_end - 1.0)
    ladder = torch.arange(lanes, dtype=torch.float64) / max(1, lanes - 1)
    return (args.eps_lanes ** (1 + 2 * ladder)).clamp(min=decayed).float()


def worker_epsilons(args: Args, frames: int) -> torch.Tensor:
    """Exploration rates ``[workers, num_envs]``: the ladder over every env of every worker.

    Examples:
        >>> args = Args(workers=2, num_envs=2, eps_end=0.0, eps_lanes=0.1)
        >>> worker_epsilons(args, frames=10**9).log10().round().tolist()
        [[-1.0, -2.0], [-2.0, -3.0]]
    """
    lanes = args.workers * args.num_envs
    return epsilons(args, lanes, frames).reshape(args.workers, args.num_envs)


def learning_rate(args: Args, frames: int) -> float:
    """Constant, then a linear decay to ``lr_end`` over the last part of the frames.

    Examples:
        >>> args = Args(frames=1000, lr=1.0, lr_end=0.0, lr_decay_start=0.5)
        >>> [learning_rate(args, f) for f in (0, 500, 750, 1000)]
        [1.0, 1.0, 0.5, 0.0]
    """
    start = args.lr_decay_start * args.frames
    fraction = min(1.0, max(0.0, (frames - start) / max(1.0, args.frames - start)))
    return args.lr + fraction * (args.lr_end - args.lr)


# ---------------------------------------------------------------------------- actors
class EpisodeReturns:
    """A collector's ``post_collect_hook`` that keeps the returns of its finished episodes.

    It lives in the Ray worker; the learner reads it back (``get_distant_attr``): ``frames``
    stepped and ``count`` episodes finished so far, the latest ``window`` returns in ``recent``.

    Examples:
        >>> hook = EpisodeReturns(window=2)
        >>> done = torch.tensor([[False], [True], [True], [True]])
        >>> ret = torch.tensor([[1.0], [2.0], [3.0], [4.0]])
        >>> hook(TensorDict({("next", "done"): done, ("next", "episode_reward"): ret}, [4]))
        >>> hook.frames, hook.count, list(hook.recent)
        (4, 3, [3.0, 4.0])
    """

    def __init__(self, window: int) -> None:
        self.frames, self.count = 0, 0
        self.recent: deque[float] = deque(maxlen=window)

    def __call__(self, batch: TensorDictBase) -> None:
        """Counts the frames of ``batch`` and records the returns of the episodes ending there."""
        done = batch["next", "done"].squeeze(-1)
        returns = batch["next", "episode_reward"].squeeze(-1)[done].tolist()
        self.frames += batch.numel()
        self.count += len(returns)
        self.recent.extend(returns)


def worker_env(num_envs: int, hidden: int, seed: int) -> TransformedEnv:
    """Runs in the Ray worker: builds its envs there (Warp kernels compile or load there)."""
    torch.set_num_threads(1)
    return make_env(num_envs, seed, hidden, torch.device("cpu"))


def written(batch: TensorDictBase) -> TensorDictBase:
    """The remote collectors' ``postproc``: what the replay stores of a batch."""
    return batch.select(*WRITTEN)


def make_collector(args: Args, policy: TensorDictSequential, rb: Any) -> Any:
    """``args.workers`` remote collectors writing whole trajectories into ``rb``.

    The workers have torchrl_ext but not this file: what they run of it (``worker_env``,
    ``written``, ``EpisodeReturns``) travels by value, as it does when this file is the script.
    """
    import ray
    from torchrl.collectors.distributed import RayCollector

    if __name__ != "__main__":
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    envs = [
        partial(worker_env, args.num_envs, args.hidden, args.seed + 7919 * i)
        for i in range(args.workers)
    ]
    return RayCollector(
        envs,
        policy=policy,
        frames_per_batch=args.num_envs * args.steps,
        total_frames=2**62,  # the learner decides when to stop
        replay_buffer=rb,
        trajs_per_batch=1,
        collector_kwargs=[
            {"postproc": written, "post_collect_hook": EpisodeReturns(args.return_window)}
            for _ in range(args.workers)
        ],
        remote_configs={"num_cpus": 1},
    )


@dataclasses.dataclass
class Snapshot:
    """What one read of the actors gave: each worker's hook, the replay's writes, the time."""

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
    """Per-second rates between two :class:`Snapshot` reads, as the logs show them.

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


class Actors:
    """The remote collectors, iterated in one background thread; weights and counters in another.

    The collecting thread only iterates the collector (the workers write into the replay
    themselves) and counts ``frames``; once the learner has reported ``updates``, it stops
    asking for batches while ``frames`` is more than two rounds of batches beyond the replay
    ratio. The service thread sends the weights handed to :meth:`push` to each worker with its
    exploration rates and, every ``stats_period`` seconds, reads the workers' hooks and the
    replay's write count into ``snapshot``. Calls to a worker wait for its current batch, so
    neither thread is the learner's.
    """

    def __init__(self, args: Args, collector: Any, rb: Any) -> None:
        self.args, self.collector, self.rb = args, collector, rb
        self.frames, self.updates = 0, 0  # updates: set by the learner
        self.snapshot: Snapshot | None = None
        self.error: BaseException | None = None
        self._latest: TensorDictBase | None = None
        self._wake, self._stop = threading.Event(), threading.Event()
        self._threads = [
            threading.Thread(target=self._guard, args=(self._collect,), daemon=True),
            threading.Thread(target=self._guard, args=(self._serve,), daemon=True),
        ]

    def start(self, policy: nn.Module, frames: int) -> None:
        """Sends the first weights, then starts both threads, counting from ``frames``."""
        self.frames = frames
        self._send(weights_of(policy))
        self.snapshot = self.read()
        for thread in self._threads:
            thread.start()

    def push(self, policy: nn.Module) -> None:
        """Queues a copy of the current weights; a newer push replaces one not yet sent."""
        self._latest = weights_of(policy)
        self._wake.set()

    def check(self) -> None:
        """Raises the error a background thread stopped on, if any."""
        if self.error is not None:
            raise RuntimeError("an actor-side thread failed (the cause follows)") from self.error

    def read(self) -> Snapshot:
        """Reads the workers' hooks and the replay's write count (waits for their batches)."""
        import ray

        workers = self.collector.remote_collectors
        calls = [w.get_distant_attr.remote("post_collect_hook") for w in workers]
        hooks = ray.get(calls, timeout=TIMEOUT)
        return Snapshot(hooks, self.rb.stats()["write_count"], time.perf_counter())

    def close(self) -> None:
        """Stops both threads and the remote collectors."""
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout=TIMEOUT)
        self.collector.shutdown(timeout=TIMEOUT)

    def _guard(self, body: Any) -> None:
        try:
            body()
        except BaseException as error:  # raised in the learner's thread by check()
            self.error = error

    def _collect(self) -> None:
        lead = 2 * self.args.workers * self.collector.frames_per_batch
        for _ in self.collector:  # each step: one worker wrote its batch into the replay
            self.frames += self.collector.frames_per_batch
            while self.updates and not self._stop.is_set():
                paced = self.args.warmup_frames + self.updates * self.args.frames_per_update
                if self.frames < paced + lead:
                    break
                time.sleep(0.002)
            if self._stop.is_set():
                return

    def _serve(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(timeout=self.args.stats_period)
            self._wake.clear()
            weights, self._latest = self._latest, None
            if weights is not None:
                self._send(weights)
            if time.perf_counter() - self.snapshot.time >= self.args.stats_period:
                self.snapshot = self.read()

    def _send(self, weights: TensorDictBase) -> None:
        eps = worker_epsilons(self.args, self.frames)
        for i in range(self.args.workers):
            weights["module", "2", "eps"] = eps[i]
            self.collector.update_policy_weights_(weights, worker_ids=i)


def weights_of(policy: nn.Module) -> TensorDictBase:
    """A CPU copy of the policy's parameters and buffers, safe to send while training goes on."""
    return TensorDict.from_module(policy).data.apply(lambda t: t.to("cpu", copy=True))


# ---------------------------------------------------------------------------- learner
class Learner:
    """R2D2's loss, optimizer and target copies over the replay service, which it starts.

    :meth:`update` trains on one sample while the next is on its way, and sends the sample's
    priorities from a background thread without waiting for them; other calls of the service
    queue behind those. Every wait on the service is bounded by ``TIMEOUT``.
    """

    def __init__(self, args: Args, qnet: nn.Module, device) -> None:
        from torchrl_ext.distributed import prioritized_ray_buffer

        self.args, self.device = args, device
        self.loss = R2D2Loss(
            qnet,
            burn_in=args.burn_in,
            n_step=args.n_step,
            gamma=args.gamma,
            value_rescaling=args.value_rescaling,
        )
        self.target_updater = HardUpdate(
            self.loss, value_network_update_interval=args.target_period
        )
        params = self.loss.value_network_params.values(True, True)
        self.optim = torch.optim.Adam(list(params), lr=args.lr, foreach=True)
        self.unit = Sequence(
            args.length,
            burn_in=args.burn_in,
            bootstrap=args.n_step - 1,
            layout="batch_time",
            priority_reduction="mixture",
            priority_eta=args.eta,
            priority_learning_only=True,
        )
        self.rb = prioritized_ray_buffer(
            args.capacity,
            sample_unit=self.unit,
            alpha=args.alpha,
            beta=args.beta,
            batch_size=args.batch_size,
            remote_config={"num_cpus": 0},
        )
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="replay")
        self._samples: Any = None  # a SamplePrefetcher once the actors have written

    @property
    def lr(self) -> float:
        """The learning rate of the last update."""
        return self.optim.param_groups[0]["lr"]

    def update(self, frames: int) -> tuple[TensorDictBase, TensorDictBase]:
        """One gradient step at the learning rate for ``frames``; returns the sample and loss."""
        if self._samples is None:
            from torchrl_ext.distributed import SamplePrefetcher

            self._samples = SamplePrefetcher(self.rb, depth=1, timeout=TIMEOUT)
        sample = self._samples.sample().to(self.device)
        for group in self.optim.param_groups:
            group["lr"] = learning_rate(self.args, frames)
        out = self.loss(sample)
        self.optim.zero_grad(set_to_none=True)
        out["loss"].backward()
        for group in self.optim.param_groups:
            torch.nn.utils.clip_grad_norm_(group["params"], self.args.max_grad_norm)
        self.optim.step()
        self.target_updater.step()
        self._pool.submit(self.unit.update_priority, self.rb, sample)
        return sample, out

    def call(self, method: str, *args: Any) -> Any:
        """Calls the replay service after the queued calls, waiting at most ``TIMEOUT``."""
        return self._pool.submit(getattr(self.rb, method), *args).result(timeout=TIMEOUT)

    def checkpoint(self) -> tuple[dict, dict]:
        """What a checkpoint saves: networks, optimizer and target counter; the replay folder."""
        state = {
            "loss": self.loss.state_dict(),
            "optim": self.optim.state_dict(),
            "target_updater": self.target_updater.counter,
        }
        return state, {"replay": lambda path: self.call("dumps", str(path.resolve()))}

    def restore(self, state: dict, replay) -> None:
        """Loads what :meth:`checkpoint` saved; the service checks the replay folder again."""
        self.loss.load_state_dict(state["loss"])
        self.optim.load_state_dict(state["optim"])
        self.target_updater.counter = state["target_updater"]
        self.call("loads", str(check_replay_folder(replay).resolve()))

    def close(self) -> None:
        """Drops pending calls and closes the replay service."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.rb.close()


def may_update(args: Args, frames: int, updates: int, snapshot: Snapshot) -> bool:
    """After the warm-up, at most one update per ``args.frames_per_update`` frames.

    Examples:
        >>> args = Args(warmup_frames=100, batch_size=1)
        >>> snapshot = Snapshot([], inserted=10**6, time=0.0)
        >>> [may_update(args, 100 + 64 * k, 2, snapshot) for k in (0, 1, 2)]
        [False, False, True]
    """
    return (
        frames >= args.warmup_frames
        and snapshot.inserted >= args.batch_size * args.window
        and updates <= (frames - args.warmup_frames) // args.frames_per_update
    )


def evaluate(args: Args, policy, device) -> float:
    """Mean return of fresh episodes (one per env, ``eval_episodes`` envs), greedy actions."""
    env = make_env(args.eval_episodes, args.seed + 1_000_003, args.hidden, device)
    returns = torch.full((args.eval_episodes,), math.nan, device=device)
    td = env.reset()
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        while bool(returns.isnan().any()):
            td, next_root = env.step_and_maybe_reset(policy(td))
            ended = td["next", "done"].squeeze(-1) & returns.isnan()
            returns[ended] = td["next", "episode_reward"].squeeze(-1)[ended]
            td = next_root
    env.close()
    return float(returns.mean())


def check_sample(args: Args, sample, out) -> None:
    """Asserts the window geometry, masks and stored states the loss relies on (``--quick``)."""
    b, t = args.batch_size, args.window
    assert sample.batch_size == (b, t), sample.batch_size
    learning = sample["learning_mask"]
    assert not bool(learning[:, : args.burn_in].any()), "burn-in records never learn"
    assert sample[STATE[0]].shape == (b, t, 1, args.hidden)
    assert sample["td_error"].shape == (b, t) and bool((sample["td_error"][~learning] == 0).all())
    assert math.isfinite(float(out["loss"].detach())), out


# ---------------------------------------------------------------------------- training
def start_ray(address: str) -> bool:
    """Joins ``address`` (or ``$RAY_ADDRESS``) or starts a local Ray; returns whether it did.

    A Ray already running in this process is used as it is.
    """
    try:
        import ray
    except ImportError:
        raise SystemExit("r2d2_distributed.py needs Ray: pip install ray") from None
    if ray.is_initialized():
        return False
    common = {"include_dashboard": False, "log_to_driver": False}
    if address:
        ray.init(address=address, **common)
    elif os.environ.get("RAY_ADDRESS"):
        ray.init(**common)
    else:
        ray.init(num_cpus=os.cpu_count(), **common)
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


def train(args: Args, run: runs.Run) -> runs.Result:
    """Starts (or joins) Ray, trains, evaluates and logs one run; stops the Ray it started."""
    if run.resume:  # before any Ray work: the replay folder holds data only
        check_replay_folder(runs.find_checkpoint(run.out) / "replay")
    started = start_ray(args.address)
    try:
        check_cpus(args.workers)
        return learn(args, run)
    finally:
        if started:
            import ray

            ray.shutdown()


def learn(args: Args, run: runs.Run) -> runs.Result:
    """The learner's side of a run, with its actors and its replay service on the running Ray."""
    device = torch.device(run.device)
    policy = make_policy(args, device)
    with contextlib.closing(Learner(args, policy[0], device)) as learner:
        recorder = runs.Recorder(run, args, updates=0, curve=[])
        if run.resume:
            learner.restore(recorder.state, recorder.checkpoint / "replay")
        window = runs.ReturnWindow(args.return_window, args.target, recorder.counters)
        acting = policy if device.type == "cpu" else make_policy(args, torch.device("cpu"))
        collector = make_collector(args, acting, learner.rb)
        with contextlib.closing(Actors(args, collector, learner.rb)) as actors:
            actors.start(policy, recorder.frames)
            learn_from(args, run, recorder, window, learner, actors, policy)
        return recorder.finish(
            learner.checkpoint,
            recorder.counters["curve"],
            final_eval=evaluate(args, TensorDictSequential(policy[0], policy[1]), device),
            title=f"R2D2 on CartPole without velocities, {args.workers} Ray workers",
            target=args.target,
            hit=window.hit,
        )


def learn_from(
    args: Args,
    run: runs.Run,
    recorder: runs.Recorder,
    window: runs.ReturnWindow,
    learner: Learner,
    actors: Actors,
    policy: TensorDictSequential,
) -> None:
    """Learns until the actors have stepped ``args.frames`` frames; logs each new snapshot."""
    counters, curve = recorder.counters, recorder.counters["curve"]
    logged = actors.snapshot
    rates = Rates(logged, counters["updates"])
    frames, loss = recorder.frames, math.nan

    def log(snapshot: Snapshot) -> None:
        """Logs a row at ``frames``, with the episodes finished since the last row."""
        mean_return = window.update(snapshot.returns_since(logged), frames, recorder.elapsed)
        curve.append((frames, mean_return))
        row = {"mean_return": mean_return, "best_mean_return": runs.best_mean(curve)}
        row.update(loss=loss, updates=counters["updates"], lr=learner.lr)
        row["epsilon"] = float(worker_epsilons(args, frames).mean())
        row.update(rates.step(snapshot, counters["updates"], args.batch_size))
        recorder.log(frames, row, learner.checkpoint)

    while frames < args.frames or (run.quick and counters["updates"] < QUICK_UPDATES):
        actors.check()
        frames, snapshot = max(frames, actors.frames), actors.snapshot
        if snapshot is not logged:
            log(snapshot)
            logged = snapshot
        elif time.perf_counter() - snapshot.time > TIMEOUT:
            raise TimeoutError(f"the actors have not answered for {TIMEOUT:.0f} s.")
        if not may_update(args, frames, counters["updates"], snapshot):
            time.sleep(0.005)
            continue
        sample, out = learner.update(frames)
        counters["updates"] += 1
        actors.updates, loss = counters["updates"], float(out["loss"].detach())
        if run.quick:
            check_sample(args, sample, out)
        if counters["updates"] % args.weight_period == 0:
            actors.push(policy)
    log(actors.read())  # the last row: the counters as the run ends


def load_policy(args: Args, state: dict, device) -> TensorDictSequential:
    """The greedy policy of a checkpoint: ``observation`` and the LSTM state to ``action``."""
    qnet = make_qnet(args).to(device)
    R2D2Loss(qnet, burn_in=args.burn_in, n_step=args.n_step).load_state_dict(state["loss"])
    return TensorDictSequential(qnet, QValueModule(action_space="categorical"))


def acting_env(args: Args, num_envs: int, seed: int, device) -> TransformedEnv:
    """An env the loaded policy acts in: the training env's transforms and the LSTM's primer."""
    return make_env(num_envs, seed, args.hidden, device)


if __name__ == "__main__":
    runs.main(Args, train, quick=QUICK)
