"""Replay-side components: sample units, fast-read storages, env-major minibatches, safe loads."""

from torchrl_ext.data.minibatches import EnvMajorMinibatches, EnvMajorSampler
from torchrl_ext.data.safe_loading import load_replay
from torchrl_ext.data.sample_units import SampleUnit, Sequence, Transition
from torchrl_ext.data.storages import FastLazyMemmapStorage, FastLazyTensorStorage

__all__ = [
    "EnvMajorMinibatches",
    "EnvMajorSampler",
    "FastLazyMemmapStorage",
    "FastLazyTensorStorage",
    "SampleUnit",
    "Sequence",
    "Transition",
    "load_replay",
]
