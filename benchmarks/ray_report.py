"""Per-component rates of the Ray layout: replay sample, replay insert, collection.

Run from the project root::

    PYTHONPATH=$PWD python benchmarks/ray_report.py [--repeats 3] [--capacity 100000]

Starts a local Ray with 2 CPUs and prints one line per repeat, then medians:

- sample: latency of ``sample()`` (64 windows of 24 steps, burn-in 8) from the Ray-served
  prioritized buffer and from the same buffer in this process, interleaved; their ratio.
- update: latency of a priority update of such a sample, through
  ``unit.update_priority`` (anchors and priorities sent) and through
  ``update_tensordict_priority`` (the whole sample sent).
- transport floor (``--floor``, alone): an empty actor call, and returning an already built
  sample from an actor (whole, or with each window's first recurrent state only).
- insert: records per second that 2 remote writers (Ray tasks) insert together.
- collection: frames per second of 1 and 2 Ray collectors (CartPoleEnv without velocities,
  LSTM Q-policy), and their ratio.
"""

from __future__ import annotations

import argparse
import statistics

import ray
import torch
from _ray_setup import (
    collection_rate,
    fill,
    insert_rate,
    local_buffer,
    sample_latency,
    served_buffer,
    transport_floor,
    update_latency,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--capacity", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=30, help="samples per latency figure")
    parser.add_argument("--insert-chunk", type=int, default=1000)
    parser.add_argument("--insert-writes", type=int, default=100)
    parser.add_argument("--num-envs", type=int, default=32)
    parser.add_argument("--frames-per-batch", type=int, default=3200)
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--floor", action="store_true", help="only the transport floor")
    args = parser.parse_args()
    torch.set_num_threads(1)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        local = local_buffer(args.capacity)
        fill(local, args.capacity)
        if args.floor:
            sample = local.sample()
            size = sum(v.numel() * v.element_size() for v in sample.values(True, True))
            for repeat in range(args.repeats):
                floor = transport_floor(sample, args.rounds)
                print(
                    f"repeat {repeat}: empty call {floor['nothing'] * 1e3:.2f} ms | return a "
                    f"built sample ({size / 1e3:.0f} kB) {floor['whole'] * 1e3:.2f} ms | with "
                    f"first states only {floor['first_states'] * 1e3:.2f} ms | local sample "
                    f"{sample_latency(local, args.rounds) * 1e3:.2f} ms",
                    flush=True,
                )
            return
        served = served_buffer(args.capacity)
        fill(served, args.capacity)
        rows = []
        for repeat in range(args.repeats):
            remote_s = sample_latency(served, args.rounds)
            local_s = sample_latency(local, args.rounds)
            update_s = update_latency(served, args.rounds, whole_sample=False)
            whole_s = update_latency(served, args.rounds, whole_sample=True)
            served.empty()
            inserts = insert_rate(served, 2, args.insert_chunk, args.insert_writes)
            fill(served, args.capacity)
            one, two = (
                collection_rate(w, args.num_envs, args.frames_per_batch, args.batches)
                for w in (1, 2)
            )
            row = (remote_s, local_s, remote_s / local_s, inserts, one, two, two / one)
            row += (update_s, whole_s)
            rows.append(row)
            print(
                f"repeat {repeat}: sample remote {remote_s * 1e3:.2f} ms, local "
                f"{local_s * 1e3:.2f} ms, ratio {row[2]:.2f}x | update "
                f"{update_s * 1e3:.2f} ms (whole sample sent {whole_s * 1e3:.2f} ms) | insert "
                f"2 writers "
                f"{inserts:,.0f} records/s | collection 1 worker {one:,.0f} f/s, 2 workers "
                f"{two:,.0f} f/s, ratio {row[6]:.2f}x",
                flush=True,
            )
        med = [statistics.median(c) for c in zip(*rows, strict=True)]
        spread = [(min(c), max(c)) for c in zip(*rows, strict=True)]
        print(
            f"median of {args.repeats}: sample ratio {med[2]:.2f}x "
            f"[{spread[2][0]:.2f}, {spread[2][1]:.2f}] (remote {med[0] * 1e3:.2f} ms, local "
            f"{med[1] * 1e3:.2f} ms); update {med[7] * 1e3:.2f} ms (whole sample "
            f"{med[8] * 1e3:.2f} ms); insert {med[3]:,.0f} records/s "
            f"[{spread[3][0]:,.0f}, {spread[3][1]:,.0f}]; collection 2 vs 1 {med[6]:.2f}x "
            f"[{spread[6][0]:.2f}, {spread[6][1]:.2f}] ({med[4]:,.0f} -> {med[5]:,.0f} f/s)"
        )
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
