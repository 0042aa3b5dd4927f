"""Replay-side components: sample units, fast-read storages, env-major minibatches, safe loads."""

from torchrl_ext.data.minibatches import EnvMajorMinibatches, EnvMajorSampler
from torchrl_ext.data.safe_loading import load_replay
from torchrl_ext.data.sample_units import SampleUnit, Sequence, Tape, Transition
from torchrl_ext.data.storages import FastLazyMemmapStorage, FastLazyTensorStorage

__all__ = [
    "EnvMajorMinibatches",
    "EnvMajorSampler",
    "FastLazyMemmapStorage",
    "FastLazyTensorStorage",
    "SampleUnit",
    "Sequence",
    "Tape",
    "Transition",
    "load_replay",
]
