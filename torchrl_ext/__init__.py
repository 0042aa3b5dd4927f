"""torchrl_ext: sequence replay, Warp-backed batched envs and recurrent GAE for TorchRL."""

__version__ = "0.1.0"
