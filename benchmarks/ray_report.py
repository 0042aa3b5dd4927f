"""Per-component rates of the Ray layout: replay sample, replay insert, collection.

Run from the project root::

    PYTHONPATH=$PWD python benchmarks/ray_report.py [--repeats 3] [--capacity 100000]

Starts a local Ray with 2 CPUs and prints one line per repeat, then medians with [min, max]:

- sample: latency of one sample (64 windows of 24 steps, burn-in 8) from the Ray-served
  prioritized buffer, through ``rb.sample()`` (packed, through a shared-memory slot) and
  through TorchRL's ``RayReplayBuffer.sample`` (pickled entry by entry), and from the same
  buffer in this process, taken in turns; the ratios to the local sample.
- prefetched: seconds the learner waits in ``SamplePrefetcher.sample()`` (depth 1) between
  learner steps (an LSTM forward and backward pass over the sample), and one such step.
- update: latency of a priority update of such a sample, through
  ``unit.update_priority`` (anchors and priorities sent) and through
  ``update_tensordict_priority`` (the whole sample sent).
- transport floor (``--floor``, alone): an empty actor call, and returning an already built
  sample from an actor (whole, with each window's first recurrent state only, packed, or
  packed into a shared-memory slot of the caller).
- insert: records per second that 2 remote writers (Ray tasks) insert together.
- collection: frames per second of 1 and 2 Ray collectors (CartPoleEnv without velocities,
  LSTM Q-policy, same envs and frames per worker), each measured twice in the order 1, 2, 2, 1
  and averaged, so a drift of the machine's speed during the repeat cancels; their ratio, the
  CPU cores the workers got, frames per worker CPU second (the cost of a frame, whatever the
  load), and how busy the whole machine was.
"""

from __future__ import annotations

import argparse
import os
import statistics

import ray
import torch
from _ray_setup import (
    collection_rate,
    fill,
    insert_rate,
    local_buffer,
    prefetched_latency,
    sample_latencies,
    sample_latency,
    served_buffer,
    transport_floor,
    update_latency,
)

FIGURES = {  # name: (format, scale)
    "packed_ms": ("{:.2f}", 1e3),
    "stock_ms": ("{:.2f}", 1e3),
    "local_ms": ("{:.2f}", 1e3),
    "packed_ratio": ("{:.2f}x", 1),
    "stock_ratio": ("{:.2f}x", 1),
    "prefetch_wait_ms": ("{:.2f}", 1e3),
    "learner_step_ms": ("{:.2f}", 1e3),
    "update_ms": ("{:.2f}", 1e3),
    "update_whole_ms": ("{:.2f}", 1e3),
    "insert_per_s": ("{:,.0f}", 1),
    "collect_1": ("{:,.0f}", 1),
    "collect_2": ("{:,.0f}", 1),
    "collect_ratio": ("{:.2f}x", 1),
    "worker_cores_1": ("{:.2f}", 1),
    "worker_cores_2": ("{:.2f}", 1),
    "frames_per_cpu_s_1": ("{:,.0f}", 1),
    "frames_per_cpu_s_2": ("{:,.0f}", 1),
    "cost_ratio": ("{:.2f}x", 1),
    "machine_busy": ("{:.2f}", 1),
    "load_average": ("{:.1f}", 1),
}


def one_repeat(served, local, args) -> dict[str, float]:
    paths = {"packed_ms": (served, "default"), "stock_ms": (served, "stock")}
    row = sample_latencies({**paths, "local_ms": (local, "default")}, args.rounds)
    row["packed_ratio"] = row["packed_ms"] / row["local_ms"]
    row["stock_ratio"] = row["stock_ms"] / row["local_ms"]
    row["prefetch_wait_ms"], row["learner_step_ms"] = prefetched_latency(served, args.rounds)
    row["update_ms"] = update_latency(served, args.rounds, whole_sample=False)
    row["update_whole_ms"] = update_latency(served, args.rounds, whole_sample=True)
    served.empty()
    row["insert_per_s"] = insert_rate(served, 2, args.insert_chunk, args.insert_writes)
    fill(served, args.capacity)
    runs = {1: [], 2: []}
    for workers in (1, 2, 2, 1):  # in ABBA order, so a drift of the machine's speed cancels
        runs[workers].append(
            collection_rate(workers, args.num_envs, args.frames_per_batch, args.batches)
        )
    for workers, got in runs.items():
        row[f"collect_{workers}"] = statistics.fmean(g["rate"] for g in got)
        row[f"worker_cores_{workers}"] = statistics.fmean(g["worker_cores"] for g in got)
        row[f"frames_per_cpu_s_{workers}"] = statistics.fmean(g["frames_per_cpu_s"] for g in got)
    row["machine_busy"] = max(g["machine_busy"] for got in runs.values() for g in got)
    row["collect_ratio"] = row["collect_2"] / row["collect_1"]
    row["cost_ratio"] = row["frames_per_cpu_s_2"] / row["frames_per_cpu_s_1"]
    row["load_average"] = os.getloadavg()[0]
    return row


def show(row: dict[str, float], spread: dict[str, tuple[float, float]] | None = None) -> str:
    parts = []
    for name, (fmt, scale) in FIGURES.items():
        text = f"{name} {fmt.format(row[name] * scale)}"
        if spread is not None:
            low, high = (fmt.format(v * scale) for v in spread[name])
            text += f" [{low}, {high}]"
        parts.append(text)
    return " | ".join(parts)


def floor(local, args) -> None:
    sample = local.sample()
    size = sum(v.numel() * v.element_size() for v in sample.values(True, True))
    for repeat in range(args.repeats):
        got = transport_floor(sample, args.rounds)
        print(
            f"repeat {repeat}: empty call {got['nothing'] * 1e3:.2f} ms | return a "
            f"built sample ({size / 1e3:.0f} kB) {got['whole'] * 1e3:.2f} ms | with "
            f"first states only {got['first_states'] * 1e3:.2f} ms | packed "
            f"{got['packed'] * 1e3:.2f} ms | into a slot {got['slot'] * 1e3:.2f} ms | local sample "
            f"{sample_latency(local, args.rounds) * 1e3:.2f} ms",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--capacity", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=30, help="samples per latency figure")
    parser.add_argument("--insert-chunk", type=int, default=1000)
    parser.add_argument("--insert-writes", type=int, default=100)
    parser.add_argument("--num-envs", type=int, default=32, help="envs per collector")
    parser.add_argument("--frames-per-batch", type=int, default=3200, help="per collector")
    parser.add_argument("--batches", type=int, default=6, help="timed batches per collector")
    parser.add_argument("--floor", action="store_true", help="only the transport floor")
    args = parser.parse_args()
    torch.set_num_threads(1)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        local = local_buffer(args.capacity)
        fill(local, args.capacity)
        if args.floor:
            floor(local, args)
            return
        served = served_buffer(args.capacity)
        fill(served, args.capacity)
        rows = []
        for repeat in range(args.repeats):
            rows.append(one_repeat(served, local, args))
            print(f"repeat {repeat}: {show(rows[-1])}", flush=True)
        median = {k: statistics.median(r[k] for r in rows) for k in FIGURES}
        spread = {k: (min(r[k] for r in rows), max(r[k] for r in rows)) for k in FIGURES}
        print(f"median of {args.repeats}: {show(median, spread)}")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
