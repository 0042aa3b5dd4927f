"""Procedural closed courses, generated per env in Warp kernels, and the car env driving them."""

from torchrl_ext.envs.course.config import CarConfig, CourseParams
from torchrl_ext.envs.course.defects import CourseDefect
from torchrl_ext.envs.course.env import CourseEnv
from torchrl_ext.envs.course.generator import CourseGenerator
from torchrl_ext.envs.course.seeds import effective_seed

__all__ = [
    "CarConfig",
    "CourseDefect",
    "CourseEnv",
    "CourseGenerator",
    "CourseParams",
    "effective_seed",
]
