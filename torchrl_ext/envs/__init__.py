"""Batched TorchRL environments whose state lives in NVIDIA Warp arrays."""

from torchrl_ext.envs.cartpole import CartPoleEnv
from torchrl_ext.envs.pendulum import PendulumEnv
from torchrl_ext.envs.warp_env import WarpEnv

__all__ = ["CartPoleEnv", "PendulumEnv", "WarpEnv"]
