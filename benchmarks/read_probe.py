"""Times the replay side's two compiled paths against their plain-torch references.

Usage: ``python benchmarks/read_probe.py [--capacities 10000,1000000] [--rounds 150]
[--processes 5]``.

On the buffers of ``sequence_report.py`` (64 windows of 120 records, 16 float features, a
``FastLazyTensorStorage``), one torch thread, and for each capacity:

- *expand*: the sampler plus ``Sequence.expand``, with the compiled window loop
  (``Sequence.use_compiled = True``) and with the batched torch ops;
- *read*: ``storage.get`` of one sample's 7,680 records, with the prefetching row kernel and
  with ``index_select`` on every leaf;
- *sample*: a whole online ``rb.sample()`` (64 records written, untimed, before each) with both
  compiled paths, without the window loop, and without the row kernel.

Everything is timed in the same rounds in an order shuffled each round (seeded), one call at a
time, so every call starts with caches holding other calls' data, as in a training loop. Each
of ``--processes`` fresh processes prints its medians; the summary gives, per row, the median
over processes and their range, and what the compiled path saves of its component's time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import subprocess
import sys
import time

import torch
from _sequence_setup import CHUNK, episodes, make_buffer

from torchrl_ext import Sequence
from torchrl_ext.data._kernels import gather

#: ``(window loop, row kernel)`` of each variant.
VARIANTS = {"compiled": (True, True), "torch_expand": (False, True), "index_select": (True, False)}
#: Which variant each part times, reference last.
PARTS = {
    "expand": ("compiled", "torch_expand"),
    "read": ("compiled", "index_select"),
    "sample": ("compiled", "torch_expand", "index_select"),
}


@contextlib.contextmanager
def variant(name: str):
    """Runs the body with the window loop and the row kernel switched as ``name`` says."""
    loop, kernel = VARIANTS[name]
    min_rows = gather.MIN_ROWS
    Sequence.use_compiled = loop
    gather.MIN_ROWS = min_rows if kernel else 1 << 62
    try:
        yield
    finally:
        Sequence.use_compiled = True
        gather.MIN_ROWS = min_rows


def draw(buffer):
    """The sampler's anchors expanded by the buffer's sample unit: ``(index, info)``."""
    index, info = buffer._sampler.sample(buffer.storage, buffer._batch_size)
    return buffer._sample_unit.expand(index, info, buffer.storage)


def timed(buffer, part: str, chunk) -> float:
    if part == "expand":
        start = time.perf_counter()
        draw(buffer)
        return time.perf_counter() - start
    if part == "read":
        index, _ = draw(buffer)
        start = time.perf_counter()
        buffer.storage.get(index)
        return time.perf_counter() - start
    buffer.extend(chunk)
    start = time.perf_counter()
    buffer.sample()
    return time.perf_counter() - start


def measure(capacities, rounds: int) -> dict:
    """Median ms of every ``capacity/part/variant``, all interleaved in one process."""
    torch.set_num_threads(1)
    buffers = {c: make_buffer("torchrl_ext", c, storage="fast") for c in capacities}
    chunk = episodes(CHUNK, torch.Generator().manual_seed(1))
    keys = [(c, p, v) for c in capacities for p, names in PARTS.items() for v in names]
    for c, p, v in keys:  # compile and warm every path once
        with variant(v):
            timed(buffers[c], p, chunk)
    times = {key: [] for key in keys}
    order = random.Random(0)
    for _ in range(rounds):
        order.shuffle(keys)
        for c, p, v in keys:
            with variant(v):
                times[(c, p, v)].append(timed(buffers[c], p, chunk))
    return {f"{c}/{p}/{v}": statistics.median(t) * 1e3 for (c, p, v), t in times.items()}


def summary(runs: list[dict], capacities) -> None:
    print(
        f"ms (median over {len(runs)} processes of per-process medians, [min, max]); "
        "saves = 1 - compiled / reference"
    )
    for c in capacities:
        for part, names in PARTS.items():
            cells, compiled = [], None
            for name in names:
                values = [run[f"{c}/{part}/{name}"] for run in runs]
                mid = statistics.median(values)
                compiled = mid if name == "compiled" else compiled
                saves = "" if name == "compiled" else f" saves {1 - compiled / mid:4.0%}"
                cells.append(f"{name} {mid:.3f} [{min(values):.3f}, {max(values):.3f}]{saves}")
            print(f"{c:>8} {part:>6}: " + "; ".join(cells))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--capacities", default="10000,1000000")
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    capacities = [int(c) for c in args.capacities.split(",")]
    if args.child:
        print(json.dumps(measure(capacities, args.rounds)))
        return
    runs = []
    for _ in range(args.processes):
        command = [sys.executable, __file__, "--child", "--capacities", args.capacities]
        out = subprocess.run(
            [*command, "--rounds", str(args.rounds)], capture_output=True, text=True, check=True
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    summary(runs, capacities)


if __name__ == "__main__":
    main()
