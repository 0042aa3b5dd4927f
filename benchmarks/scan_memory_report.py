"""Prints FFMModule's training-pass time over LSTMModule's, over several fresh processes.

Usage::

    PYTHONPATH=. python benchmarks/scan_memory_report.py [--processes 3] [--rounds 5]

Each process builds both modules on the same ``[B, T]`` rows (episode starts at 0.05 per
step, stored states), warms both up, then times one forward + backward pass of each per round,
in an order shuffled every round, with one torch thread (``OPENBLAS_NUM_THREADS=1`` too). Each
call is timed in wall-clock and in the process's CPU time (user + system: on a machine shared
with other jobs, the part of the wall-clock time the process did not run is left out). The
table shows, per size, the median over processes of each module's median, then the per-process
ratio ``ffm / lstm`` of the medians, as min / median / max over processes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

import torch
from _scan_memory_setup import INPUT, RATE, cases

SIZES = ((64, 1024, 256), (8, 1024, 256), (8, 32, 64))


def round_robin(calls: dict, rounds: int, seed: int = 0) -> dict[str, dict[str, float]]:
    """Median wall-clock and CPU milliseconds of one call of each case, after a warm-up."""
    wall = {name: [] for name in calls}
    cpu = {name: [] for name in calls}
    for fn in calls.values():
        fn()
    order, rng = list(calls), random.Random(seed)
    for _ in range(rounds):
        rng.shuffle(order)
        for name in order:
            start, start_cpu = time.perf_counter(), time.process_time()
            calls[name]()
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    return {
        name: {
            "wall": statistics.median(wall[name]) * 1e3,
            "cpu": statistics.median(cpu[name]) * 1e3,
        }
        for name in calls
    }


def one_process(rounds: int) -> dict:
    """This process's medians, keyed by ``"BxT/H"``."""
    torch.set_num_threads(1)
    return {
        f"{n_rows}x{steps}/{hidden}": round_robin(cases(n_rows, steps, hidden, RATE), rounds)
        for n_rows, steps, hidden in SIZES
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_process(args.rounds)))
        return
    command = [sys.executable, os.path.abspath(__file__), "--one", "--rounds", str(args.rounds)]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    results = []
    for _ in range(args.processes):
        proc = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(f"torch {torch.__version__}, 1 thread, {args.processes} fresh processes, interleaved")
    print(f"forward + backward of output.sum(), input {INPUT}, {RATE} starts/step; FFM m=32, c=4")
    print("ms = median over processes of each process's median\n")
    print("| rows | hidden | clock | ffm ms | lstm ms | ffm / lstm (min / med / max) |")
    print("|" + "---|" * 6)
    for key in results[0]:
        size, hidden = key.split("/")
        for clock in ("wall", "cpu"):
            med = {
                name: statistics.median(r[key][name][clock] for r in results)
                for name in ("ffm", "lstm")
            }
            ratios = [r[key]["ffm"][clock] / r[key]["lstm"][clock] for r in results]
            print(
                f"| {size} | {hidden} | {clock} | {med['ffm']:.1f} | {med['lstm']:.1f} | "
                f"{_spread(ratios)} |"
            )


def _spread(values: list[float]) -> str:
    return f"{min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f}"


if __name__ == "__main__":
    main()
