"""Procedural closed courses, generated per env in Warp kernels, and the car env driving them."""

from torchrl_ext.envs.course.env import CarConfig, CourseEnv
from torchrl_ext.envs.course.generator import (
    CourseDefect,
    CourseGenerator,
    CourseParams,
    effective_seed,
)

__all__ = [
    "CarConfig",
    "CourseDefect",
    "CourseEnv",
    "CourseGenerator",
    "CourseParams",
    "effective_seed",
]
