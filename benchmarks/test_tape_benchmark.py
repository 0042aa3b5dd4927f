"""Tape replay against Sequence windows: sampling cost at about the same records per batch.

Both units sample from the same wrapped buffer of episodes (geometric lengths, mean
``MEAN_EPISODE``, capped at the tape length), through one ``TensorDictReplayBuffer`` with a
seeded uniform sampler: ``Tape(length, rows=ROWS)`` with twice the draws its tapes need on
average, against ``Sequence(length, layout="batch_time")`` with ``ROWS`` windows, so both
return ``[ROWS, length]`` batches. The whole ``rb.sample()`` is timed (expansion and storage
read). CI runs this file once with ``--benchmark-disable`` at the small default sizes; set
``TORCHRL_EXT_BENCH_TAPE_LENGTHS=256,1024,4096`` for larger tapes.
"""

from __future__ import annotations

import os

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

from torchrl_ext import Sequence, Tape

LENGTHS = [int(n) for n in os.environ.get("TORCHRL_EXT_BENCH_TAPE_LENGTHS", "256").split(",")]
ROWS = 8
MEAN_EPISODE = 50
CAPACITY = 20_000


def episodes(records: int, longest: int, generator: torch.Generator) -> TensorDict:
    """``records`` records of episodes of geometric length (mean ``MEAN_EPISODE``), capped."""
    ends = torch.rand(records, generator=generator) < 1.0 / MEAN_EPISODE
    since = torch.zeros(records, dtype=torch.long)  # steps since the last episode end
    count = 0
    for i, end in enumerate(ends.tolist()):
        count += 1
        if count == longest:
            end = True
            ends[i] = True
        since[i] = count
        if end:
            count = 0
    return TensorDict(
        {
            "observation": torch.randn(records, 16, generator=generator),
            ("next", "done"): ends.unsqueeze(-1),
            "step": since,
        },
        [records],
    )


def make_buffer(unit: str, length: int) -> TensorDictReplayBuffer:
    if unit == "tape":
        sample_unit = Tape(length, rows=ROWS)
        batch_size = 2 * ROWS * length // MEAN_EPISODE
    else:
        sample_unit = Sequence(length, layout="batch_time")
        batch_size = ROWS
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(CAPACITY),
        sample_unit=sample_unit,
        batch_size=batch_size,
        generator=torch.Generator().manual_seed(0),
    )
    buffer.extend(episodes(CAPACITY + CAPACITY // 3, length, torch.Generator().manual_seed(1)))
    return buffer


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("unit", ["tape", "sequence"])
def test_sample(benchmark, unit, length):
    buffer = make_buffer(unit, length)
    benchmark.group = f"tape vs sequence, [{ROWS}, {length}] batches"
    batch = benchmark(buffer.sample)
    assert batch.shape == (ROWS, length)
    if unit == "tape":  # the draws fill most of every tape
        assert batch["validity_mask"].float().mean() > 0.8
