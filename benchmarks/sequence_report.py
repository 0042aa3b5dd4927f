"""Prints the sequence-replay ratio table (1 torch thread, medians).

Usage: ``python benchmarks/sequence_report.py [--capacities 10000,100000,1000000] [--rounds 200]
[--storages stock,fast] [--timing interleaved] [--output docs/benchmarks] [--name sequence]``
(``--output`` also writes ``<name>.txt`` and ``<name>.png``).

Each path samples B=64 windows (burn-in 40, learning 80) from a wrapped buffer of 16 float
features and episodes of 100-300 records. Static: nothing is written between samples. Online:
64 records are written before each sample (the write is not timed). Each path is timed on
torchrl's ``LazyTensorStorage`` ("stock") and on our ``FastLazyTensorStorage`` ("fast"), whose
read returns the same data. Capacities, paths and storages take turns in the same rounds, in an
order shuffled every round (seeded), so that machine noise hits all of them alike.

``--timing interleaved`` (the default) times one sample per path and round, so every sample
starts with caches holding other paths' data, as a sample in a training loop follows other
work. ``--timing warm`` times ten back-to-back samples of one path per round, as a tight
sampling loop (or pytest-benchmark) sees it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import pathlib
import random
import statistics
import time

import torch
from _sequence_setup import CHUNK, PATHS, STORAGES, episodes, make_buffer

#: Back-to-back samples per path and round in the warm timing.
WARM_BLOCK = 10


class Timing:
    """How samples are timed: ``interleaved`` (one per path and round) or ``warm`` (blocks).

    Either way the paths take turns in an order shuffled every round (seeded), so no path
    always follows the same other one: at 1e6 records the slice sampler's pass over the whole
    storage leaves the caches full of its data, which a fixed order would hand to one path.
    """

    def __init__(self, name: str, seed: int = 0):
        self.name = name
        self.block = 1 if name == "interleaved" else WARM_BLOCK
        self._rng = random.Random(seed)

    def order(self, keys) -> list:
        """The keys in this round's order."""
        keys = list(keys)
        self._rng.shuffle(keys)
        return keys


def measure(buffers, chunk, rounds, online, timing):
    """Median ms per sample of each buffer."""
    times = {key: [] for key in buffers}
    for _ in range(rounds):
        for key in timing.order(buffers):
            buffer = buffers[key]
            for _ in range(timing.block):
                if online:
                    buffer.extend(chunk)
                start = time.perf_counter()
                buffer.sample()
                times[key].append(time.perf_counter() - start)
    return {key: statistics.median(t) * 1e3 for key, t in times.items()}


def expand_only(buffers, rounds, timing):
    """Ms of each sample unit's own share: sampler + expand, without the storage read."""
    times = {key: [] for key in buffers}
    for _ in range(rounds):
        for key in timing.order(buffers):
            buffer = buffers[key]
            storage, sampler, unit = buffer.storage, buffer._sampler, buffer._sample_unit
            for _ in range(timing.block):
                start = time.perf_counter()
                index, info = sampler.sample(storage, buffer._batch_size)
                unit.expand(index, info, storage)
                times[key].append(time.perf_counter() - start)
    return {key: statistics.median(t) * 1e3 for key, t in times.items()}


def read_only(buffers, capacities, storages, rounds, timing):
    """Ms per storage read of one sample's 7,680 records (a fresh draw of our unit each)."""
    times = {(capacity, name): [] for capacity in capacities for name in storages}
    for _ in range(rounds):
        for capacity in timing.order(capacities):
            drawn = buffers[(capacity, storages[0], "torchrl_ext")]
            for name in timing.order(storages):
                storage = buffers[(capacity, name, "torchrl_ext")].storage
                for _ in range(timing.block):
                    index, info = drawn._sampler.sample(drawn.storage, drawn._batch_size)
                    index, _ = drawn._sample_unit.expand(index, info, drawn.storage)
                    start = time.perf_counter()
                    storage.get(index)
                    times[(capacity, name)].append(time.perf_counter() - start)
    return {key: statistics.median(t) * 1e3 for key, t in times.items()}


def select(medians: dict, capacity: int, storage: str) -> dict:
    """``{path: ms}`` of one capacity and storage out of ``{(capacity, storage, path): ms}``."""
    return {path: ms for (c, name, path), ms in medians.items() if (c, name) == (capacity, storage)}


def measure_all(capacities, storages, chunk, rounds, timing):
    """Rows ``(capacity, storage, static, online, units)``.

    Every capacity, storage and path is timed in the same rounds (and so are the unit and read
    rows), so that a change in the machine's load between the start and the end of the run
    moves all of them alike; the ratios between capacities (the scaling target) depend on it
    as much as those between paths.
    """
    buffers = {
        (capacity, name, path): make_buffer(path, capacity, storage=name)
        for capacity in capacities
        for name in storages
        for path in PATHS
    }
    for buffer in buffers.values():
        buffer.sample()
    static = measure(buffers, chunk, rounds, online=False, timing=timing)
    online = measure(buffers, chunk, rounds, online=True, timing=timing)
    units = expand_only(
        {
            (capacity, path): buffers[(capacity, storages[0], path)]
            for capacity in capacities
            for path in ("torchrl_ext", "torchrl_sequence")
        },
        rounds,
        timing,
    )
    reads = read_only(buffers, capacities, storages, rounds, timing)
    rows = []
    for capacity in capacities:
        mine = {path: ms for (c, path), ms in units.items() if c == capacity}
        mine["read"] = {name: ms for (c, name), ms in reads.items() if c == capacity}
        rows += [
            (capacity, name, select(static, capacity, name), select(online, capacity, name), mine)
            for name in storages
        ]
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--capacities", default="10000,100000,1000000")
    parser.add_argument("--storages", default="stock,fast", help=f"of {sorted(STORAGES)}")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument(
        "--timing",
        choices=("interleaved", "warm"),
        default="interleaved",
        help="interleaved: one sample per path and round, each after other paths' samples "
        f"(the default); warm: {WARM_BLOCK} back-to-back samples per path and round",
    )
    parser.add_argument("--output", default=None, help="folder for the table and chart")
    parser.add_argument("--name", default="sequence", help="file stem of the table and chart")
    args = parser.parse_args()
    torch.set_num_threads(1)
    chunk = episodes(CHUNK, torch.Generator().manual_seed(1))
    storages = args.storages.split(",")
    capacities = [int(c) for c in args.capacities.split(",")]
    rows = measure_all(capacities, storages, chunk, args.rounds, Timing(args.timing))
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        print_table(rows, args.timing)
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


def print_table(rows, timing):
    """The ratio table; ``ceiling`` is the ratio a sample unit costing nothing would reach.

    The ceiling takes our unit's own time (sampler + expand, timed alone) out of our sample:
    what is left is the storage read and the buffer's bookkeeping, which every path pays.
    """
    print(
        "ms per sample (median), 1 torch thread; ratio = theirs / ours; B=64, burn-in 40, length 80"
    )
    described = {
        "interleaved": "one call per path and round, paths in a shuffled order",
        "warm": f"{WARM_BLOCK} back-to-back calls per path and round, paths in a shuffled order",
    }
    print(f"timing: {timing}, {described[timing]}")
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
