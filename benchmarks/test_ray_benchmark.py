"""The Ray layout's components, timed: served vs local sample, remote insert, Ray collection.

CI runs this file once with ``--benchmark-disable`` at tiny sizes; run
``python benchmarks/ray_report.py`` for the figures on the "Scaling out" page.
"""

from __future__ import annotations

import pytest
import torch

ray = pytest.importorskip("ray", reason="needs ray (pip install 'torchrl_ext[ray]')")

from _ray_setup import (  # noqa: E402
    BATCH,
    BURN_IN,
    LENGTH,
    collection_rate,
    fill,
    insert_rate,
    local_buffer,
    prefetched_latency,
    sample_latency,
    served_buffer,
    transport_floor,
    update_latency,
)

CAPACITY = 2000


@pytest.fixture(scope="module")
def ray_local():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.parametrize("where", ["local", "served"])
def test_sample(benchmark, ray_local, where):
    buffer = local_buffer(CAPACITY) if where == "local" else served_buffer(CAPACITY)
    try:
        fill(buffer, CAPACITY, chunk=500)
        benchmark.group = "ray sample 64 windows of 24"
        batch = benchmark(buffer.sample)
        assert batch.shape == torch.Size([BATCH, BURN_IN + LENGTH])
        if where == "local":
            floor = transport_floor(batch, rounds=2)
            assert set(floor) == {"nothing", "whole", "first_states", "packed", "slot"}
        else:
            assert sample_latency(buffer, 2, path="stock") > 0
            wait, step = prefetched_latency(buffer, 2)
            assert wait >= 0 and step > 0
    finally:
        if where == "served":
            buffer.close()


def test_update_insert_and_collection_rates(ray_local):
    buffer = served_buffer(CAPACITY)
    try:
        assert insert_rate(buffer, 2, chunk=100, writes=3) > 0
        assert len(buffer) == 2 * 4 * 100
        assert update_latency(buffer, 2, whole_sample=False) > 0
        assert update_latency(buffer, 2, whole_sample=True) > 0
    finally:
        buffer.close()
    got = collection_rate(1, num_envs=2, frames_per_batch=20, batches=1)
    assert got["rate"] > 0 and got["machine_busy"] >= 0
    assert set(got) == {"rate", "worker_cores", "frames_per_cpu_s", "driver_cores", "machine_busy"}
