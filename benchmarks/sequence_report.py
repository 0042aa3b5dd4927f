"""Prints the sequence-replay ratio table of issue 2 (1 torch thread, medians).

Usage: ``python benchmarks/sequence_report.py [--capacities 10000,100000,1000000] [--rounds 200]
[--output docs/benchmarks]`` (``--output`` also writes ``sequence.txt`` and ``sequence.png``).

Each path samples B=64 windows (burn-in 40, learning 80) from a wrapped buffer of 16 float
features and episodes of 100-300 records. Static: nothing is written between samples. Online:
64 records are written before each sample (the write is not timed). Paths are timed in
interleaved rounds so that machine noise hits all of them alike.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import pathlib
import statistics
import time

import torch
from _sequence_setup import CHUNK, PATHS, episodes, make_buffer


def measure(buffers, chunk, rounds, online):
    times = {path: [] for path in buffers}
    for _ in range(rounds):
        for path, buffer in buffers.items():
            if online:
                buffer.extend(chunk)
            start = time.perf_counter()
            buffer.sample()
            times[path].append(time.perf_counter() - start)
    return {path: statistics.median(t) * 1e3 for path, t in times.items()}


def expand_only(buffer, rounds):
    """The sample unit's own share: sampler + expand, without the storage read."""
    storage, sampler, unit = buffer.storage, buffer._sampler, buffer._sample_unit
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        index, info = sampler.sample(storage, buffer._batch_size)
        unit.expand(index, info, storage)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--capacities", default="10000,100000,1000000")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--output", default=None, help="folder for sequence.txt/.png")
    args = parser.parse_args()
    torch.set_num_threads(1)
    chunk = episodes(CHUNK, torch.Generator().manual_seed(1))
    rows, ours_online = [], {}
    for capacity in [int(c) for c in args.capacities.split(",")]:
        buffers = {path: make_buffer(path, capacity) for path in PATHS}
        for buffer in buffers.values():
            buffer.sample()
        static = measure(buffers, chunk, args.rounds, online=False)
        online = measure(buffers, chunk, args.rounds, online=True)
        units = {
            p: expand_only(buffers[p], args.rounds) for p in ("torchrl_ext", "torchrl_sequence")
        }
        ours_online[capacity] = online["torchrl_ext"]
        rows.append((capacity, static, online, units))
        del buffers
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        print_table(rows, ours_online)
    print(text.getvalue(), end="")
    if args.output:
        folder = pathlib.Path(args.output)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "sequence.txt").write_text(text.getvalue())
        plot(rows, folder / "sequence.png")


def plot(rows, path):
    """Bar chart of ms per sample by capacity, regime and path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), sharey=True)
    width = 0.27
    for ax, regime in zip(axes, ("static", "online"), strict=True):
        for j, name in enumerate(PATHS):
            values = [
                (static if regime == "static" else online)[name] for _, static, online, _ in rows
            ]
            ax.bar([i + (j - 1) * width for i in range(len(rows))], values, width, label=name)
        ax.set_xticks(range(len(rows)), [f"{capacity:.0e}" for capacity, *_ in rows])
        ax.set_title(f"{regime} (B=64, burn-in 40, length 80)")
        ax.set_xlabel("capacity")
    axes[0].set_ylabel("ms per sample (median)")
    axes[0].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def print_table(rows, ours_online):
    units_by = {capacity: units["torchrl_ext"] for capacity, _, _, units in rows}
    print("ms per sample (median), 1 torch thread; ratio = theirs / ours")
    header = (
        f"{'capacity':>9} {'regime':>7} {'ours':>7} {'torchrl':>8} {'slice':>7} "
        f"{'vs torchrl':>10} {'vs slice':>9}"
    )
    print(header)
    for capacity, static, online, units in rows:
        for regime, t in (("static", static), ("online", online)):
            ours = t["torchrl_ext"]
            print(
                f"{capacity:>9} {regime:>7} {ours:>7.3f} {t['torchrl_sequence']:>8.3f} "
                f"{t['slice_sampler']:>7.3f} {t['torchrl_sequence'] / ours:>9.2f}x "
                f"{t['slice_sampler'] / ours:>8.2f}x"
            )
        print(
            f"{capacity:>9} {'unit':>7} {units['torchrl_ext']:>7.3f} "
            f"{units['torchrl_sequence']:>8.3f} {'':>7} "
            f"{units['torchrl_sequence'] / units['torchrl_ext']:>9.2f}x  (sampler+expand)"
        )
    if len(ours_online) > 1:
        small, large = min(ours_online), max(ours_online)
        print(
            f"ours online at {large} / at {small}: "
            f"{ours_online[large] / ours_online[small]:.2f}x (target <= 1.3x); "
            f"the unit alone: {units_by[large] / units_by[small]:.2f}x"
        )


if __name__ == "__main__":
    main()
