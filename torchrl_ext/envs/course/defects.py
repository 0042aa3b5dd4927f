"""Why a course is unusable: the :class:`CourseDefect` bits of a generator's ``defects`` array.

The kernels' validity check (:mod:`~torchrl_ext.envs.course._kernels.validity`) writes them; a
course is usable (``valid``) when it has none.
"""

from __future__ import annotations

import enum

__all__ = ["CourseDefect"]


class CourseDefect(enum.IntFlag):
    """Why a course is unusable; the bits of :attr:`CourseGenerator.defects`.

    Examples:
        >>> from torchrl_ext.envs.course import CourseDefect
        >>> bits = CourseDefect(3)
        >>> print(CourseDefect.TIGHT_TURN in bits, CourseDefect.BAD_PARAMS in bits)
        True False
    """

    SELF_INTERSECTING = 1
    """Two non-adjacent edges of the centerline polygon cross."""
    TIGHT_TURN = 2
    """A radius of curvature of the centerline is below half the track width."""
    TOO_FEW_CHECKPOINTS = 4
    """The course is too short for two checkpoints at the spacing."""
    TOO_MANY_CHECKPOINTS = 8
    """The course needs more checkpoints than ``max_checkpoints`` slots."""
    BAD_PARAMS = 16
    """A parameter is out of range or not finite (written directly into a parameter view)."""
    CROSSING_GATES = 32
    """Two gate bars cross each other (gates mode only)."""
