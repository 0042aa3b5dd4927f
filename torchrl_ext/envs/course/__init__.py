"""Procedural closed courses, generated per env in Warp kernels from ``(seed, epoch)``."""

from torchrl_ext.envs.course.generator import (
    CourseDefect,
    CourseGenerator,
    CourseParams,
    effective_seed,
)

__all__ = ["CourseDefect", "CourseGenerator", "CourseParams", "effective_seed"]
