"""Sequence replay: ours against torchrl's ``Sequence`` unit and ``SliceSampler``, same buffer.

Static: sampling from a wrapped buffer that nothing writes to. Online: 64 records are written
(untimed) before every timed sample, which is where re-reading the done flags after each write
hurts. CI runs this file once with ``--benchmark-disable`` at a small capacity; set
``TORCHRL_EXT_BENCH_CAPACITIES=10000,100000,1000000`` for the full sizes, or run
``python benchmarks/sequence_report.py`` for the ratio table. Every path runs on torchrl's
``LazyTensorStorage`` and on our ``FastLazyTensorStorage``.
"""

from __future__ import annotations

import os

import pytest
import torch
from _sequence_setup import CHUNK, PATHS, STORAGES, episodes, make_buffer

CAPACITIES = [int(c) for c in os.environ.get("TORCHRL_EXT_BENCH_CAPACITIES", "10000").split(",")]


@pytest.mark.parametrize("capacity", CAPACITIES)
@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("path", PATHS)
def test_static_sample(benchmark, path, storage, capacity):
    buffer = make_buffer(path, capacity, storage=storage)
    benchmark.group = f"sequence static capacity={capacity} storage={storage}"
    batch = benchmark(buffer.sample)
    assert batch.numel() > 0


@pytest.mark.parametrize("capacity", CAPACITIES)
@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("path", PATHS)
def test_online_sample(benchmark, path, storage, capacity):
    buffer = make_buffer(path, capacity, storage=storage)
    chunk = episodes(CHUNK, torch.Generator().manual_seed(1))
    benchmark.group = f"sequence online capacity={capacity} storage={storage}"

    def write():
        buffer.extend(chunk)
        return (), {}

    batch = benchmark.pedantic(buffer.sample, setup=write, rounds=50, warmup_rounds=2)
    assert batch.numel() > 0
