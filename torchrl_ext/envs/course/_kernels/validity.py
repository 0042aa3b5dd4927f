"""Why a course is unusable: the defect checks that end a rebuild.

:func:`check_validity` writes a course's defect bits (the ``DEFECT_*`` constants, mirrored by
:class:`~torchrl_ext.envs.course.CourseDefect`) and ``valid``: a self-crossing centerline, a turn
tighter than the track or crossing gate bars, too few or too many checkpoints, bad parameters.
"""

from __future__ import annotations

import warp as wp

from torchrl_ext.envs.course._kernels.courses import Courses, Params
from torchrl_ext.envs.course.config import MAX_HARMONICS

MIN_CHECKPOINTS = 2
"""Fewest checkpoints of a usable course."""

DEFECT_SELF_INTERSECTING = wp.constant(1)
DEFECT_TIGHT_TURN = wp.constant(2)
DEFECT_TOO_FEW_CHECKPOINTS = wp.constant(4)
DEFECT_TOO_MANY_CHECKPOINTS = wp.constant(8)
DEFECT_BAD_PARAMS = wp.constant(16)
DEFECT_CROSSING_GATES = wp.constant(32)

_MAX_HARMONICS = wp.constant(MAX_HARMONICS)
_MIN_CHECKPOINTS = wp.constant(MIN_CHECKPOINTS)


@wp.func
def is_star_shaped(centerline: wp.array2d(dtype=wp.vec2f), env: wp.int32) -> wp.bool:
    """Every edge turns strictly counter-clockwise about the origin (then the polygon is simple).

    True exactly when every radius has the same sign, as the polygon's vertices sit at increasing
    angles ``2 pi i / P``.
    """
    num_points = centerline.shape[1]
    for i in range(num_points):
        a = centerline[env, i]
        b = centerline[env, (i + 1) % num_points]
        if not (a[0] * b[1] - a[1] * b[0] > 0.0):
            return False
    return True


@wp.func
def orient(p: wp.vec2f, q: wp.vec2f, r: wp.vec2f) -> wp.float32:
    """Twice the signed area of the triangle ``p, q, r`` (positive: counter-clockwise)."""
    return (q[0] - p[0]) * (r[1] - p[1]) - (q[1] - p[1]) * (r[0] - p[0])


@wp.func
def edges_cross(a: wp.vec2f, b: wp.vec2f, c: wp.vec2f, d: wp.vec2f) -> wp.bool:
    """Segments ``ab`` and ``cd`` cross at a point interior to both."""
    first = orient(a, b, c) * orient(a, b, d) < 0.0
    return first and orient(c, d, a) * orient(c, d, b) < 0.0


@wp.func
def crosses_itself(centerline: wp.array2d(dtype=wp.vec2f), env: wp.int32) -> wp.bool:
    """Two non-adjacent edges of the closed polygon cross (O(P^2) pair test)."""
    num_points = centerline.shape[1]
    for i in range(num_points - 2):
        a = centerline[env, i]
        b = centerline[env, i + 1]
        last = wp.where(i == 0, num_points - 1, num_points)
        for j in range(i + 2, last):
            c = centerline[env, j]
            d = centerline[env, (j + 1) % num_points]
            if edges_cross(a, b, c, d):
                return True
    return False


@wp.func
def is_simple(centerline: wp.array2d(dtype=wp.vec2f), env: wp.int32) -> wp.bool:
    """The closed centerline does not cross itself.

    A star-shaped polygon is simple, which settles every course whose radius stays positive in
    O(P); only the others pay the O(P^2) pair test.
    """
    if is_star_shaped(centerline, env):
        return True
    return not crosses_itself(centerline, env)


@wp.func
def has_tight_turn(
    centerline: wp.array2d(dtype=wp.vec2f), env: wp.int32, width: wp.float32
) -> wp.bool:
    """Some circumradius of three consecutive points is below ``width / 2``.

    The circumradius is ``|a| |b| |a + b| / (2 |a x b|)``; compared without a division.
    """
    num_points = centerline.shape[1]
    for i in range(num_points):
        p = centerline[env, (i + num_points - 1) % num_points]
        q = centerline[env, i]
        r = centerline[env, (i + 1) % num_points]
        a = q - p
        b = r - q
        turn = wp.abs(a[0] * b[1] - a[1] * b[0])
        if wp.length(a) * wp.length(b) * wp.length(a + b) < width * turn:
            return True
    return False


@wp.func
def gates_cross(posts: wp.array3d(dtype=wp.vec2f), env: wp.int32, count: wp.int32) -> wp.bool:
    """Two of the first ``count`` gate bars cross at a point interior to both (pair test)."""
    for j in range(count):
        for k in range(j + 1, count):
            if edges_cross(posts[env, j, 0], posts[env, j, 1], posts[env, k, 0], posts[env, k, 1]):
                return True
    return False


@wp.func
def params_defect(p: Params, env: int) -> wp.int32:
    """``DEFECT_BAD_PARAMS`` for non-finite or out-of-range parameters, else 0."""
    scale, roughness, width = p.scale[env], p.roughness[env], p.width[env]
    spacing, gate_width, harmonics = p.checkpoint_spacing[env], p.gate_width[env], p.harmonics[env]
    ok = scale > 0.0 and wp.isfinite(scale) and roughness >= 0.0 and wp.isfinite(roughness)
    ok = ok and width > 0.0 and wp.isfinite(width) and spacing > 0.0 and wp.isfinite(spacing)
    ok = ok and gate_width > 0.0 and wp.isfinite(gate_width)
    ok = ok and harmonics >= 1 and harmonics <= _MAX_HARMONICS
    if ok:
        return 0
    return DEFECT_BAD_PARAMS


@wp.func
def check_validity(c: Courses, env: int, needed: int, max_checkpoints: int, gates: int):
    """Write env ``env``'s defect bits and ``valid = (defects == 0)``.

    A track (``gates == 0``) is checked for tight turns against its width, a gates course for
    crossing bars; both for a self-crossing centerline, the ``needed`` checkpoint count and the
    parameters.
    """
    bits = params_defect(c.params, env)
    if not is_simple(c.centerline, env):
        bits = bits | DEFECT_SELF_INTERSECTING
    if gates == 0:
        if has_tight_turn(c.centerline, env, c.params.width[env]):
            bits = bits | DEFECT_TIGHT_TURN
    elif gates_cross(c.posts, env, c.checkpoint_count[env]):
        bits = bits | DEFECT_CROSSING_GATES
    if needed < _MIN_CHECKPOINTS:
        bits = bits | DEFECT_TOO_FEW_CHECKPOINTS
    if needed > max_checkpoints:
        bits = bits | DEFECT_TOO_MANY_CHECKPOINTS
    c.defects[env] = bits
    c.valid[env] = wp.where(bits == 0, 1, 0)
