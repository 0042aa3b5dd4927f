"""The course generator's per-env arrays as the Warp structs its kernels take.

:class:`Courses` bundles a generator's state and course arrays, :class:`Params` one set of per-env
course parameters (the current ones, inside :class:`Courses`, or the next-course ones); see
:class:`~torchrl_ext.envs.course.CourseGenerator` for what each array holds.
"""

from __future__ import annotations

from typing import get_type_hints

import warp as wp

from torchrl_ext.envs._kernels.common import array_struct
from torchrl_ext.envs.course.config import CourseParams

Params = array_struct(
    "Params",
    {
        name: wp.int32 if kind is int else wp.float32
        for name, kind in get_type_hints(CourseParams).items()
    },
    __name__,
)
"""Per-env course parameters, one ``[N]`` array per ``CourseParams`` field (int32 or float32)."""

Courses = array_struct(
    "Courses",
    {
        "seed": wp.int64,
        "epoch": wp.int64,
        "generation": wp.int64,
        "valid": wp.int32,
        "defects": wp.int32,
        "centerline": wp.array2d(dtype=wp.vec2f),
        "arc_length": wp.array2d(dtype=wp.float32),
        "checkpoints": wp.array2d(dtype=wp.vec2f),
        "checkpoint_count": wp.int32,
        "params": Params,
        "coefficients": wp.array2d(dtype=wp.float32),
        "posts": wp.array3d(dtype=wp.vec2f),
    },
    __name__,
)
"""Every per-env array of the generator but the next-course parameters (see its docstring)."""
