"""Shared set-up of the sequence-replay benchmarks: one buffer layout, three sample paths."""

from __future__ import annotations

import logging

import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer
from torchrl.data.replay_buffers import Sequence as TorchRLSequence

from torchrl_ext import Sequence
from torchrl_ext.data import FastLazyTensorStorage

logging.getLogger("torchrl").setLevel(logging.WARNING)

BATCH = 64
BURN_IN = 40
LENGTH = 80
FEATURES = 16
CHUNK = 64
PATHS = ("torchrl_ext", "torchrl_sequence", "slice_sampler")
#: The storage every path reads from: torchrl's, or ours whose read gathers rows with
#: ``index_select`` (identical data). Within one storage all three paths do the same read.
STORAGES = {"stock": LazyTensorStorage, "fast": FastLazyTensorStorage}


def episodes(num: int, generator: torch.Generator) -> TensorDict:
    """``num`` records of 16 float features with episodes of random length 100-300."""
    lengths = torch.randint(100, 301, (num // 100 + 2,), generator=generator)
    ends = torch.cumsum(lengths, 0) - 1
    done = torch.zeros(num, 1, dtype=torch.bool)
    done[ends[ends < num]] = True
    return TensorDict(
        {"observation": torch.randn(num, FEATURES, generator=generator), ("next", "done"): done},
        [num],
    )


def make_buffer(
    path: str, capacity: int, seed: int = 0, storage: str = "stock"
) -> TensorDictReplayBuffer:
    """A wrapped buffer of ``capacity`` records on ``storage`` sampling windows through ``path``."""
    window = BURN_IN + LENGTH
    kwargs = {"storage": STORAGES[storage](capacity), "batch_size": BATCH}
    if path == "torchrl_ext":
        kwargs["sample_unit"] = Sequence(LENGTH, burn_in=BURN_IN)
    elif path == "torchrl_sequence":
        kwargs["sample_unit"] = TorchRLSequence(LENGTH, burn_in=BURN_IN)
    elif path == "slice_sampler":
        kwargs["sampler"] = SliceSampler(slice_len=window, end_key=("next", "done"))
        kwargs["batch_size"] = BATCH * window
    else:
        raise ValueError(f"unknown path={path!r}")
    buffer = TensorDictReplayBuffer(**kwargs)
    generator = torch.Generator().manual_seed(seed)
    fill = capacity + capacity // 3  # wrapped: the write seam sits inside the storage
    data = episodes(fill, generator)
    for start in range(0, fill, 1 << 18):
        buffer.extend(data[start : start + (1 << 18)])
    return buffer


def online_step(buffer: TensorDictReplayBuffer, chunk: TensorDict) -> TensorDict:
    """One online iteration: write 64 records, then sample."""
    buffer.extend(chunk)
    return buffer.sample()
