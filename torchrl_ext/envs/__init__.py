"""Batched TorchRL environments whose state lives in NVIDIA Warp arrays."""

from torchrl_ext.envs import course
from torchrl_ext.envs.cartpole import CartPoleEnv
from torchrl_ext.envs.course import CourseDefect, CourseGenerator, CourseParams, effective_seed
from torchrl_ext.envs.course_env import CarConfig, CourseEnv
from torchrl_ext.envs.pendulum import PendulumEnv
from torchrl_ext.envs.warp_env import WarpEnv

__all__ = [
    "CarConfig",
    "CartPoleEnv",
    "CourseDefect",
    "CourseEnv",
    "CourseGenerator",
    "CourseParams",
    "PendulumEnv",
    "WarpEnv",
    "course",
    "effective_seed",
]
