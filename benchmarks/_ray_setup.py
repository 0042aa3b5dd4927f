"""Shared set-up of the Ray benchmarks: the served replay, its writers, the Ray collectors.

Every measurement returns a rate or a latency of one configuration; the callers interleave
the configurations they compare and repeat them.
"""

from __future__ import annotations

import os
import sys
import time
from functools import partial

import ray
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.collectors.distributed import RayCollector
from torchrl.data import TensorDictPrioritizedReplayBuffer
from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer
from torchrl.envs import Compose, InitTracker, TransformedEnv
from torchrl.modules import LSTMModule, QValueModule

from torchrl_ext import Sequence
from torchrl_ext.data import FastLazyTensorStorage
from torchrl_ext.distributed import SamplePrefetcher, pack_tensordict, prioritized_ray_buffer
from torchrl_ext.distributed.packing import _pack
from torchrl_ext.distributed.slots import SlotPool

BURN_IN, LENGTH, BATCH = 8, 16, 64  # windows of 24 steps, 64 per sample
OBS, HIDDEN = 2, 64

# Ray workers cannot import this folder's modules: send the functions defined here by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def make_unit() -> Sequence:
    return Sequence(length=LENGTH, burn_in=BURN_IN, layout="batch_time")


def records(n: int, seed: int) -> TensorDict:
    """``n`` CartPole-like records with LSTM states, episodes of 50 to 200 steps."""
    gen = torch.Generator().manual_seed(seed)
    done = torch.rand(n, 1, generator=gen) < 1 / 125
    return TensorDict(
        {
            "observation": torch.randn(n, OBS, generator=gen),
            "action": torch.randint(2, (n,), generator=gen),
            "recurrent_state_h": torch.randn(n, 1, HIDDEN, generator=gen),
            "recurrent_state_c": torch.randn(n, 1, HIDDEN, generator=gen),
            ("next", "observation"): torch.randn(n, OBS, generator=gen),
            ("next", "reward"): torch.ones(n, 1),
            ("next", "done"): done,
            ("next", "terminated"): done.clone(),
        },
        [n],
    )


def local_buffer(capacity: int) -> TensorDictPrioritizedReplayBuffer:
    return TensorDictPrioritizedReplayBuffer(
        alpha=0.6,
        beta=0.4,
        storage=FastLazyTensorStorage(capacity),
        sample_unit=make_unit(),
        batch_size=BATCH,
    )


def served_buffer(capacity: int):
    return prioritized_ray_buffer(
        capacity, sample_unit=make_unit(), batch_size=BATCH, remote_config={"num_cpus": 0}
    )


def fill(buffer, capacity: int, chunk: int = 10_000) -> None:
    for start in range(0, capacity, chunk):
        buffer.extend(records(min(chunk, capacity - start), seed=start))


def _sampler(buffer, path: str):
    """``path="stock"``: a served buffer through TorchRL's ``RayReplayBuffer.sample`` (the
    sample pickled entry by entry); ``"default"``: the buffer's own ``sample`` (for a served
    buffer, packed into one array)."""
    return partial(RayReplayBuffer.sample, buffer) if path == "stock" else buffer.sample


def sample_latency(buffer, rounds: int, path: str = "default") -> float:
    """Median seconds of one ``sample()`` of ``BATCH`` windows through ``path``."""
    return sample_latencies({"one": (buffer, path)}, rounds)["one"]


def sample_latencies(paths: dict[str, tuple], rounds: int) -> dict[str, float]:
    """Median seconds of one sample for each ``name: (buffer, path)``, taken in turns (one
    sample of each per round), so every path sees the same load."""
    samplers = {name: _sampler(buffer, path) for name, (buffer, path) in paths.items()}
    times = {name: [] for name in paths}
    for _ in range(rounds):
        for name, sample in samplers.items():
            start = time.perf_counter()
            sample()
            times[name].append(time.perf_counter() - start)
    return {name: sorted(t)[len(t) // 2] for name, t in times.items()}


class LearnerStep:
    """A stand-in learner step: an LSTM forward and backward pass over a sample's windows."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.lstm = nn.LSTM(OBS, HIDDEN, batch_first=True)

    def __call__(self, sample: TensorDict) -> None:
        out, _ = self.lstm(sample["observation"])
        out.square().mean().backward()


def prefetched_latency(buffer, rounds: int, depth: int = 1) -> tuple[float, float]:
    """Median seconds the learner waits in ``SamplePrefetcher.sample()`` between learner
    steps, and the median seconds of one learner step."""
    prefetcher = SamplePrefetcher(buffer, depth=depth, timeout=120)
    step = LearnerStep()
    step(prefetcher.sample())  # the first sample was requested before any step
    waits, steps = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        sample = prefetcher.sample()
        middle = time.perf_counter()
        step(sample)
        waits.append(middle - start)
        steps.append(time.perf_counter() - middle)
    return sorted(waits)[rounds // 2], sorted(steps)[rounds // 2]


def update_latency(buffer, rounds: int, whole_sample: bool) -> float:
    """Median seconds of one priority update of a ``BATCH``-window sample.

    ``whole_sample=False``: the unit's ``update_priority`` (reduced here, anchors sent);
    ``True``: ``update_tensordict_priority`` (the whole sample sent, reduced in the actor).
    """
    unit = make_unit()
    sample = buffer.sample()
    sample["td_error"] = torch.rand(sample.shape, generator=torch.Generator().manual_seed(0))
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        if whole_sample:
            buffer.update_tensordict_priority(sample)
        else:
            unit.update_priority(buffer, sample)
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


@ray.remote(num_cpus=1)
def _insert(buffer, chunk: int, writes: int) -> tuple[int, float, float]:
    data = records(chunk, seed=0)
    buffer.extend(data)  # warm: connection, first write
    start = time.time()
    for _ in range(writes):
        buffer.extend(data)
    return chunk * writes, start, time.time()


def insert_rate(buffer, workers: int, chunk: int, writes: int) -> float:
    """Records per second that ``workers`` remote writers insert together."""
    results = ray.get([_insert.remote(buffer, chunk, writes) for _ in range(workers)], timeout=600)
    total = sum(r[0] for r in results)
    return total / (max(r[2] for r in results) - min(r[1] for r in results))


@ray.remote(num_cpus=0)
class _Echo:
    """Returns a sample built once: what moving a sample through Ray costs, nothing else."""

    def __init__(self, sample: TensorDict) -> None:
        self.sample = sample

    def nothing(self) -> None:
        return None

    def whole(self) -> TensorDict:
        return self.sample

    def first_states(self) -> tuple[TensorDict, TensorDict]:
        keys = ("recurrent_state_h", "recurrent_state_c")
        return self.sample.exclude(*keys), self.sample.select(*keys)[:, 0].clone()

    def packed(self):
        return pack_tensordict(self.sample)

    def slot(self, path: str):
        """The packed sample written into the caller's shared-memory slot; schema returned."""
        return _pack(self.sample, path)


def transport_floor(sample: TensorDict, rounds: int) -> dict[str, float]:
    """Median seconds of an empty actor call and of returning ``sample`` from an actor: whole,
    with the recurrent states of each window's first record only, packed into one array, or
    packed into a shared-memory slot of this process."""
    echo, slots = _Echo.remote(sample), SlotPool()
    ray.get(echo.nothing.remote(), timeout=120)
    args = {"slot": (slots.acquire(),)}
    assert ray.get(echo.slot.remote(*args["slot"]), timeout=120).data is None, "slot not written"
    out = {}
    for name in ("nothing", "whole", "first_states", "packed", "slot"):
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            ray.get(getattr(echo, name).remote(*args.get(name, ())), timeout=120)
            times.append(time.perf_counter() - start)
        out[name] = sorted(times)[len(times) // 2]
    ray.kill(echo)
    slots.close()
    return out


def _lstm() -> LSTMModule:
    return LSTMModule(input_size=OBS, hidden_size=HIDDEN, in_key="observation", out_key="embed")


def make_policy() -> TensorDictSequential:
    torch.manual_seed(0)
    head = TensorDictModule(nn.Linear(HIDDEN, 2), in_keys=["embed"], out_keys=["action_value"])
    return TensorDictSequential(_lstm(), head, QValueModule(action_space="categorical"))


def make_env(seed: int, num_envs: int) -> TransformedEnv:
    torch.set_num_threads(1)
    from torchrl_ext.envs import CartPoleEnv

    env = CartPoleEnv(num_envs, seed=seed, observe_velocity=False)
    return TransformedEnv(env, Compose(InitTracker(), _lstm().make_tensordict_primer()))


def _cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_busy_seconds() -> float:
    """CPU seconds all cores of the machine have spent busy (not idle, not waiting on I/O)."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def _pid(actor) -> int:
    return ray.get(actor.__ray_call__.remote(lambda _: os.getpid()), timeout=120)


def collection_rate(
    workers: int, num_envs: int, frames_per_batch: int, batches: int
) -> dict[str, float]:
    """What ``workers`` Ray collectors deliver, after two warm batches per worker.

    Every worker collects ``frames_per_batch`` frames from ``num_envs`` envs per batch; the
    timed window is ``batches`` batches per worker, so the same work per worker whatever the
    number of workers. Returns ``rate`` (frames per second), ``worker_cores`` (CPU seconds
    the workers used per second), ``frames_per_cpu_s`` (frames per worker CPU second, the
    cost of a frame whatever the load), ``driver_cores`` and ``machine_busy`` (busy cores of
    the whole machine, everybody's work included).
    """
    make_env(0, 1)  # the Warp kernels are compiled and cached before any worker loads them
    collector = RayCollector(
        [partial(make_env, seed, num_envs) for seed in range(workers)],
        policy=make_policy(),
        frames_per_batch=frames_per_batch,
        total_frames=frames_per_batch * (batches + 2) * workers * 4,
        remote_configs={"num_cpus": 1},
    )
    try:
        collector.update_policy_weights_()
        pids = [_pid(actor) for actor in collector.remote_collectors]
        warm, timed = 2 * workers, batches * workers
        frames = 0
        for i, data in enumerate(collector):
            if i == warm - 1:
                start, driver = time.perf_counter(), time.process_time()
                worker_cpu, busy = sum(map(_cpu_seconds, pids)), _machine_busy_seconds()
            elif i >= warm:
                frames += data.numel()
            if i == warm - 1 + timed:
                break
        wall = time.perf_counter() - start
        worker_cpu = sum(map(_cpu_seconds, pids)) - worker_cpu
        return {
            "rate": frames / wall,
            "worker_cores": worker_cpu / wall,
            "frames_per_cpu_s": frames / worker_cpu if worker_cpu else float("nan"),
            "driver_cores": (time.process_time() - driver) / wall,
            "machine_busy": (_machine_busy_seconds() - busy) / wall,
        }
    finally:
        collector.shutdown()
