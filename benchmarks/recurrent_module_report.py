"""Prints the whole-row LSTMModule's speed ratios against its anchors, over several fresh processes.

Usage::

    PYTHONPATH=. python benchmarks/recurrent_module_report.py [--processes 3] [--rounds 7]

For each row size ``[B, T]``, hidden width and rate of episode starts per step, each process
times one forward + backward pass of ``ours``, ``nn_lstm_floor`` and (at 0.05 starts per step,
where the target is set) ``torchrl_pad`` round-robin: one call of each per round, in an order
shuffled every round, after a warm-up, with one torch thread (the compiled path's per-step
products run in torch's BLAS, which follows it; ``OPENBLAS_NUM_THREADS=1`` holds scipy's, used
where torch exports none, to one thread too).
The table shows the median over processes of each process's medians, then the ratios per
process with their min / median / max.
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
from _recurrent_setup import cases

SIZES = ((8, 32), (64, 128))
HIDDENS = (64, 256)
RATES = (0.005, 0.05, 0.1)
PAD_RATE = 0.05


def round_robin(calls: dict, rounds: int, seed: int = 0) -> dict[str, float]:
    """Median milliseconds of one call of each case, after a warm-up call."""
    times = {name: [] for name in calls}
    for fn in calls.values():
        fn()
    order, rng = list(calls), random.Random(seed)
    for _ in range(rounds):
        rng.shuffle(order)
        for name in order:
            start = time.perf_counter()
            calls[name]()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def one_process(rounds: int) -> dict:
    """This process's medians, keyed by ``"BxT/H/rate"``."""
    torch.set_num_threads(1)
    out = {}
    for n_rows, steps in SIZES:
        for hidden in HIDDENS:
            for rate in RATES:
                calls = cases(n_rows, steps, hidden, rate)
                if rate != PAD_RATE:
                    calls.pop("torchrl_pad")
                big = n_rows * steps * hidden > 8 * 32 * 256
                out[f"{n_rows}x{steps}/{hidden}/{rate}"] = round_robin(
                    calls, max(3, rounds // 2) if big else rounds
                )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=7)
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
    print("forward + backward of output.sum(), LSTM, input 16; ms = median over processes\n")
    header = "| rows | hidden | starts/step | ours ms | floor ms | pad ms |"
    header += " ours / floor (min / med / max) | pad / ours (min / med / max) |"
    print(header)
    print("|" + "---|" * 8)
    for key in results[0]:
        size, hidden, rate = key.split("/")
        med = {name: statistics.median(r[key][name] for r in results) for name in results[0][key]}
        over_floor = [r[key]["ours"] / r[key]["nn_lstm_floor"] for r in results]
        pad_cells = ("—", "—")
        if "torchrl_pad" in med:
            speedup = [r[key]["torchrl_pad"] / r[key]["ours"] for r in results]
            pad_cells = (f"{med['torchrl_pad']:.2f}", _spread(speedup))
        print(
            f"| {size} | {hidden} | {rate} | {med['ours']:.2f} | {med['nn_lstm_floor']:.2f} | "
            f"{pad_cells[0]} | {_spread(over_floor)} | {pad_cells[1]} |"
        )


def _spread(values: list[float]) -> str:
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


if __name__ == "__main__":
    main()
