"""Times one sample's storage read at two capacities, warm and cold (1 torch thread, medians).

Usage: ``python benchmarks/read_probe.py [--capacities 10000,1000000] [--rounds 200]``.

Each read gathers the 7,680 records (64 windows of 120) that our ``Sequence`` unit drew from
a wrapped buffer of ``make_buffer`` (16 float features, a done flag, the stored index), with a
fresh index each call, through ``FastLazyTensorStorage.get``: with the prefetching kernel
("kernel") and with the kernel turned off, ``index_select`` on every leaf ("index_select").
Warm: the read follows another read of the same storage. Cold: the read follows a write of a
64 MiB scratch tensor (caches flushed), then the sample unit's expand, as in a training loop.
All variants run interleaved in one process; ratio = index_select / kernel.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from _sequence_setup import make_buffer
from torchrl.data import LazyTensorStorage

from torchrl_ext.data._kernels import gather as rows_kernel


def index_select_read(storage, index):
    """``storage.get(index)`` with the kernel turned off: ``index_select`` on every leaf."""
    min_rows, rows_kernel.MIN_ROWS = rows_kernel.MIN_ROWS, 1 << 62
    try:
        return storage.get(index)
    finally:
        rows_kernel.MIN_ROWS = min_rows


VARIANTS = {"index_select": index_select_read, "kernel": lambda storage, index: storage.get(index)}


def draw_index(buffer) -> torch.Tensor:
    """The storage index of one sample: the buffer's sampler, then its sample unit."""
    index, info = buffer._sampler.sample(buffer.storage, buffer._batch_size)
    return buffer._sample_unit.expand(index, info, buffer.storage)[0]


def check(buffers) -> None:
    """Every variant reads what the stock storage reads, for int64 and int32 indices."""
    for buffer in buffers.values():
        for dtype in (torch.int64, torch.int32):
            index = draw_index(buffer).to(dtype)
            stock = LazyTensorStorage.get(buffer.storage, index)
            for fn in VARIANTS.values():
                ours = fn(buffer.storage, index)
                for key in stock.keys(True, True):
                    assert torch.equal(ours[key], stock[key]), key


def measure(buffers, rounds: int) -> dict:
    """Median ms of each ``(capacity, mode, variant)``, all interleaved."""
    scratch = torch.empty(64 << 20, dtype=torch.uint8)
    times = {}
    for _ in range(rounds):
        for capacity, buffer in buffers.items():
            for mode in ("warm", "cold"):
                for name, fn in VARIANTS.items():
                    if mode == "cold":
                        scratch.fill_(1)
                    else:
                        fn(buffer.storage, draw_index(buffer))
                    index = draw_index(buffer)
                    start = time.perf_counter()
                    fn(buffer.storage, index)
                    elapsed = time.perf_counter() - start
                    times.setdefault((capacity, mode, name), []).append(elapsed)
    return {key: statistics.median(t) * 1e3 for key, t in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--capacities", default="10000,1000000")
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    capacities = [int(c) for c in args.capacities.split(",")]
    buffers = {c: make_buffer("torchrl_ext", c, storage="fast") for c in capacities}
    check(buffers)
    medians = measure(buffers, args.rounds)
    print(f"{'capacity':>9} {'mode':>5} " + " ".join(f"{n:>13}" for n in VARIANTS) + "  ratio")
    for capacity in capacities:
        for mode in ("warm", "cold"):
            ms = [medians[(capacity, mode, name)] for name in VARIANTS]
            cells = " ".join(f"{m:13.4f}" for m in ms)
            print(f"{capacity:>9} {mode:>5} {cells}  {ms[0] / ms[1]:5.2f}")


if __name__ == "__main__":
    main()
