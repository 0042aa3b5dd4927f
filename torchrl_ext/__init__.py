"""torchrl_ext: sequence replay, Warp-backed batched envs and recurrent GAE for TorchRL."""

from torchrl_ext.data import SampleUnit, Sequence, Transition

__all__ = ["SampleUnit", "Sequence", "Transition"]
__version__ = "0.1.0"
