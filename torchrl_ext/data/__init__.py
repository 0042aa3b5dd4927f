"""Replay-side components: sample units (anchors into windows) and env-major minibatches."""

from torchrl_ext.data.minibatches import EnvMajorMinibatches, EnvMajorSampler
from torchrl_ext.data.sample_units import SampleUnit, Sequence, Transition

__all__ = ["EnvMajorMinibatches", "EnvMajorSampler", "SampleUnit", "Sequence", "Transition"]
