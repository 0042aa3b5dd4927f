"""Prints RecurrentGAE's speed ratios against its anchors, over several fresh processes.

Usage::

    PYTHONPATH=. python benchmarks/gae_report.py [--processes 6] [--rounds 15]

Each process times the cases round-robin (one call of each per round, in an order shuffled
every round) with one torch thread and the C library's default allocator settings, as GAE
runs in a training loop: between other calls that allocate and free large blocks. It also
counts the minor page faults of each call (fresh pages mapped on first touch). The table
shows each process's medians and ratios, then the spread of the ratios over the processes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time

import torch
from _gae_setup import HIDDEN, plain_cases, recurrent_cases

PLAIN_SIZE = (4096, 256)
RECURRENT_SIZE = (256, 128)
RATIOS = {
    "torchrl GAE / ours (>= 6)": ("plain", "torchrl_gae", "ours"),
    "SB3 numpy / ours (>= 1.5)": ("plain", "sb3_numpy_time_major", "ours"),
    "ours / raw nn.LSTM (<= 1.3)": ("recurrent", "ours", "raw_nn_lstm_T_plus_1"),
    "torchrl GAE(deactivate_vmap) / ours (>= 4)": (
        "recurrent",
        "torchrl_gae_deactivate_vmap",
        "ours",
    ),
}


def round_robin(cases: dict, rounds: int, seed: int = 0) -> dict[str, tuple[float, float]]:
    """Per case: median milliseconds and median page faults of one call, after a warm-up."""
    times = {name: [] for name in cases}
    faults = {name: [] for name in cases}
    for fn in cases.values():
        fn()
    order, rng = list(cases), random.Random(seed)
    for _ in range(rounds):
        rng.shuffle(order)
        for name in order:
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            start = time.perf_counter()
            cases[name]()
            times[name].append(time.perf_counter() - start)
            faults[name].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    return {
        name: (statistics.median(times[name]) * 1e3, statistics.median(faults[name]))
        for name in cases
    }


def one_process(rounds: int) -> dict:
    """The timings of this process."""
    torch.set_num_threads(1)
    plain = round_robin(plain_cases(*PLAIN_SIZE), rounds)
    cases = recurrent_cases(*RECURRENT_SIZE)
    slow = {"torchrl_gae_deactivate_vmap": cases.pop("torchrl_gae_deactivate_vmap")}
    # ours and the raw LSTM alternate tightly; torchrl's slow call is timed on its own
    recurrent = round_robin(cases, rounds * 2)
    recurrent.update(round_robin(slow, max(3, rounds // 3)))
    return {"plain": plain, "recurrent": recurrent}


def ratios(result: dict) -> dict[str, float]:
    return {
        label: result[part][num][0] / result[part][den][0]
        for label, (part, num, den) in RATIOS.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_process(args.rounds)))
        return
    command = [sys.executable, os.path.abspath(__file__), "--one", "--rounds", str(args.rounds)]
    results = []
    for _ in range(args.processes):
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
    print(f"torch {torch.__version__}, 1 thread, default allocator, {args.processes} processes")
    print("medians of round-robin timings: ms (page faults per call)\n")
    titles = {
        "plain": f"Plain GAE {PLAIN_SIZE[0]}x{PLAIN_SIZE[1]} float32, env-major input",
        "recurrent": f"Recurrent recompute, LSTM hidden {HIDDEN}, "
        f"{RECURRENT_SIZE[0]}x{RECURRENT_SIZE[1]}",
    }
    for part, title in titles.items():
        print(f"## {title}")
        for name in results[0][part]:
            cells = "  ".join(
                f"{ms:7.2f} ({pf:4.0f})" for ms, pf in (r[part][name] for r in results)
            )
            print(f"  {name:28s} {cells}")
        print()
    print("## Ratios per process, then min / median / max")
    per_process = [ratios(r) for r in results]
    for label in RATIOS:
        values = [p[label] for p in per_process]
        cells = " ".join(f"{v:6.2f}" for v in values)
        spread = f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"
        print(f"  {label:44s} {cells}   [{spread}]")


if __name__ == "__main__":
    main()
