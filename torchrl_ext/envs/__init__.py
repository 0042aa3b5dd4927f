"""Batched TorchRL environments whose state lives in NVIDIA Warp arrays.

Importing this package initializes Warp, quietly (:mod:`torchrl_ext._warp`; set
``TORCHRL_EXT_VERBOSE=1`` for Warp's own output).
"""

from torchrl_ext import _warp
from torchrl_ext.envs import course, interop, popgym
from torchrl_ext.envs.cartpole import CartPoleEnv
from torchrl_ext.envs.course import (
    CarConfig,
    CourseDefect,
    CourseEnv,
    CourseGenerator,
    CourseParams,
    effective_seed,
)
from torchrl_ext.envs.pendulum import PendulumEnv
from torchrl_ext.envs.render import RenderPixels, render_frame, render_frames
from torchrl_ext.envs.signalling import SignallingEnv
from torchrl_ext.envs.transforms import BaseEnvState, PreviousAction
from torchrl_ext.envs.warp_env import WarpEnv

_warp.init()

__all__ = [
    "BaseEnvState",
    "CarConfig",
    "CartPoleEnv",
    "CourseDefect",
    "CourseEnv",
    "CourseGenerator",
    "CourseParams",
    "PendulumEnv",
    "PreviousAction",
    "RenderPixels",
    "SignallingEnv",
    "WarpEnv",
    "course",
    "effective_seed",
    "interop",
    "popgym",
    "render_frame",
    "render_frames",
]
