"""Procedural closed courses, generated per env in Warp kernels, and the car env driving them."""

from torchrl_ext.envs.course.config import CarConfig, CourseParams
from torchrl_ext.envs.course.env import CourseEnv
from torchrl_ext.envs.course.generator import CourseDefect, CourseGenerator, effective_seed

__all__ = [
    "CarConfig",
    "CourseDefect",
    "CourseEnv",
    "CourseGenerator",
    "CourseParams",
    "effective_seed",
]
