"""Replay-side components: sample units that expand sampled anchors into windows."""

from torchrl_ext.data.sample_units import SampleUnit, Sequence, Transition

__all__ = ["SampleUnit", "Sequence", "Transition"]
