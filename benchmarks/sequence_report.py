"""Prints the sequence-replay ratio table of issue 2 (1 torch thread, medians).

Usage: ``python benchmarks/sequence_report.py [--capacities 10000,100000,1000000] [--rounds 200]
[--storages stock,fast] [--block 1] [--output docs/benchmarks] [--name sequence]`` (``--output``
also writes ``<name>.txt`` and ``<name>.png``).

Each path samples B=64 windows (burn-in 40, learning 80) from a wrapped buffer of 16 float
features and episodes of 100-300 records. Static: nothing is written between samples. Online:
64 records are written before each sample (the write is not timed). Each path is timed on
torchrl's ``LazyTensorStorage`` ("stock") and on our ``FastLazyTensorStorage`` ("fast"), whose
read returns the same data; all paths and storages are timed in interleaved rounds so that
machine noise hits all of them alike. With ``--block 1`` (the default) every timed sample follows
samples of the other paths, so it starts with caches holding their data, as a sample in a
training loop follows a learner step; ``--block 10`` times ten back-to-back samples of one path
per round, warm, as a tight sampling loop (or pytest-benchmark) sees it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import pathlib
import statistics
import time

import torch
from _sequence_setup import CHUNK, PATHS, STORAGES, episodes, make_buffer


def measure(buffers, chunk, rounds, online, block=1):
    """Median ms per sample of each buffer: ``block`` samples back-to-back per buffer and round."""
    times = {key: [] for key in buffers}
    for _ in range(rounds):
        for key, buffer in buffers.items():
            for _ in range(block):
                if online:
                    buffer.extend(chunk)
                start = time.perf_counter()
                buffer.sample()
                times[key].append(time.perf_counter() - start)
    return {key: statistics.median(t) * 1e3 for key, t in times.items()}


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


def read_only(buffers, storages, rounds):
    """Ms per storage read of the same 7,680 records (one index our unit drew), per storage."""
    any_buffer = buffers[(storages[0], "torchrl_ext")]
    index, info = any_buffer._sampler.sample(any_buffer.storage, any_buffer._batch_size)
    index, _ = any_buffer._sample_unit.expand(index, info, any_buffer.storage)
    reads = {name: buffers[(name, "torchrl_ext")].storage for name in storages}
    times = {name: [] for name in storages}
    for _ in range(rounds):
        for name, storage in reads.items():
            start = time.perf_counter()
            storage.get(index)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def by_storage(medians: dict, storage: str) -> dict:
    """``{path: ms}`` of one storage out of ``{(storage, path): ms}``."""
    return {path: ms for (name, path), ms in medians.items() if name == storage}


def measure_capacity(capacity, storages, chunk, rounds, block):
    """Rows ``(capacity, storage, static, online, units)``, all paths and storages interleaved."""
    buffers = {
        (name, path): make_buffer(path, capacity, storage=name)
        for name in storages
        for path in PATHS
    }
    for buffer in buffers.values():
        buffer.sample()
    static = measure(buffers, chunk, rounds, online=False, block=block)
    online = measure(buffers, chunk, rounds, online=True, block=block)
    units = {
        path: expand_only(buffers[(storages[0], path)], rounds)
        for path in ("torchrl_ext", "torchrl_sequence")
    }
    units["read"] = read_only(buffers, storages, rounds)
    return [
        (capacity, name, by_storage(static, name), by_storage(online, name), units)
        for name in storages
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--capacities", default="10000,100000,1000000")
    parser.add_argument("--storages", default="stock,fast", help=f"of {sorted(STORAGES)}")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument(
        "--block",
        type=int,
        default=1,
        help="samples per path back-to-back in each round: 1 times every sample after the "
        "other paths ran (cold caches, the default); 10 times warm back-to-back samples",
    )
    parser.add_argument("--output", default=None, help="folder for the table and chart")
    parser.add_argument("--name", default="sequence", help="file stem of the table and chart")
    args = parser.parse_args()
    torch.set_num_threads(1)
    chunk = episodes(CHUNK, torch.Generator().manual_seed(1))
    storages = args.storages.split(",")
    rows = []
    for capacity in [int(c) for c in args.capacities.split(",")]:
        rows += measure_capacity(capacity, storages, chunk, args.rounds, args.block)
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        print_table(rows, args.block)
    print(text.getvalue(), end="")
    if args.output:
        folder = pathlib.Path(args.output)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{args.name}.txt").write_text(text.getvalue())
        plot(rows, folder / f"{args.name}.png")


def plot(rows, path):
    """Bar charts of ms per sample by capacity and path: one row of charts per storage."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    storages = list(dict.fromkeys(name for _, name, *_ in rows))
    fig, axes = plt.subplots(
        len(storages), 2, figsize=(9, 3 * len(storages)), sharey=True, squeeze=False
    )
    width = 0.27
    for line, name in zip(axes, storages, strict=True):
        mine = [row for row in rows if row[1] == name]
        for ax, regime in zip(line, ("static", "online"), strict=True):
            for j, path_name in enumerate(PATHS):
                values = [
                    (static if regime == "static" else online)[path_name]
                    for _, _, static, online, _ in mine
                ]
                ax.bar(
                    [i + (j - 1) * width for i in range(len(mine))], values, width, label=path_name
                )
            ax.set_xticks(range(len(mine)), [f"{capacity:.0e}" for capacity, *_ in mine])
            ax.set_title(f"{regime}, {name} storage", fontsize=10)
        line[0].set_ylabel("ms per sample (median)")
    axes[-1][0].set_xlabel("capacity")
    axes[-1][1].set_xlabel("capacity")
    axes[0][0].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def print_table(rows, block):
    """The ratio table; ``ceiling`` is the ratio a sample unit costing nothing would reach.

    The ceiling takes our unit's own time (sampler + expand, timed alone) out of our sample:
    what is left is the storage read and the buffer's bookkeeping, which every path pays.
    """
    print(
        "ms per sample (median), 1 torch thread; ratio = theirs / ours; B=64, burn-in 40, length 80"
    )
    timing = "each sample after the other paths ran" if block == 1 else f"{block} back-to-back"
    print(f"timing: {timing}")
    print(
        f"{'capacity':>9} {'storage':>7} {'regime':>7} {'ours':>7} {'torchrl':>8} {'slice':>7} "
        f"{'vs torchrl':>10} {'vs slice':>9} {'ceiling':>8}"
    )
    for capacity, name, static, online, units in rows:
        for regime, t in (("static", static), ("online", online)):
            ours, theirs = t["torchrl_ext"], t["torchrl_sequence"]
            ceiling = theirs / max(ours - units["torchrl_ext"], 1e-9)
            print(
                f"{capacity:>9} {name:>7} {regime:>7} {ours:>7.3f} {theirs:>8.3f} "
                f"{t['slice_sampler']:>7.3f} {theirs / ours:>9.2f}x "
                f"{t['slice_sampler'] / ours:>8.2f}x {ceiling:>7.2f}x"
            )
        if name == rows[0][1]:
            print(
                f"{capacity:>9} {'':>7} {'unit':>7} {units['torchrl_ext']:>7.3f} "
                f"{units['torchrl_sequence']:>8.3f} {'':>7} "
                f"{units['torchrl_sequence'] / units['torchrl_ext']:>9.2f}x  (sampler+expand)"
            )
            reads = units["read"]
            if "stock" in reads and "fast" in reads:
                print(
                    f"{capacity:>9} {'':>7} {'read':>7} stock {reads['stock']:.3f} "
                    f"fast {reads['fast']:.3f}: {reads['stock'] / reads['fast']:.2f}x "
                    "(storage.get of one sample's records)"
                )
    print_scaling(rows)


def print_scaling(rows):
    """Ours online at the largest capacity over the smallest, per storage, and the unit's."""
    capacities = sorted({row[0] for row in rows})
    if len(capacities) < 2:
        return
    small, large = capacities[0], capacities[-1]
    for name in dict.fromkeys(row[1] for row in rows):
        online = {capacity: on["torchrl_ext"] for capacity, n, _, on, _ in rows if n == name}
        print(
            f"ours online at {large} / at {small}, {name} storage: "
            f"{online[large] / online[small]:.2f}x (target <= 1.3x)"
        )
    units = {capacity: unit["torchrl_ext"] for capacity, *_, unit in rows}
    print(f"the unit alone (sampler + expand): {units[large] / units[small]:.2f}x")


if __name__ == "__main__":
    main()
