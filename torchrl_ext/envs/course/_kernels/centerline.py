"""A course's centerline and what lies along it: its arc-length table, checkpoints and gate posts.

The centerline is a closed polar curve around the origin sampled at ``P`` evenly spaced angles
(:func:`build_centerline`); :func:`measure_arc_length` tabulates its length, and
:func:`place_gates` puts the checkpoints and the gates' posts at arc lengths along it.
"""

from __future__ import annotations

import warp as wp

from torchrl_ext.envs.course._kernels.courses import Courses
from torchrl_ext.envs.course.config import MAX_HARMONICS

_TWO_PI = wp.constant(6.283185307179586)
_MAX_HARMONICS = wp.constant(MAX_HARMONICS)


@wp.func
def centerline_point(
    coefficients: wp.array2d(dtype=wp.float32),
    env: wp.int32,
    theta: wp.float32,
    scale: wp.float32,
    roughness: wp.float32,
    harmonics: wp.int32,
) -> wp.vec2f:
    """The centerline point at angle ``theta``: polar form around the origin.

    Its radius is ``scale * (1 + roughness * sum_k a_k cos(k theta + phi_k))``.

    Harmonic ``k`` (1-based, ``k <= harmonics``) has amplitude ``a_k = (2 u - 1) / k`` and phase
    ``phi_k = 2 pi v`` from the draws ``u = coefficients[2k - 2]``, ``v = coefficients[2k - 1]``.
    """
    wave = wp.float32(0.0)
    for k in range(wp.min(harmonics, _MAX_HARMONICS)):
        order = wp.float32(k + 1)
        amplitude = (2.0 * coefficients[env, 2 * k] - 1.0) / order
        phase = _TWO_PI * coefficients[env, 2 * k + 1]
        wave = wave + amplitude * wp.cos(order * theta + phase)
    radius = scale * (1.0 + roughness * wave)
    return wp.vec2f(radius * wp.cos(theta), radius * wp.sin(theta))


@wp.func
def build_centerline(c: Courses, env: int):
    """Centerline point ``i`` at angle ``2 pi i / P`` (:func:`centerline_point`)."""
    p = c.params
    num_points = c.centerline.shape[1]
    step = _TWO_PI / wp.float32(num_points)
    for i in range(num_points):
        theta = wp.float32(i) * step
        c.centerline[env, i] = centerline_point(
            c.coefficients, env, theta, p.scale[env], p.roughness[env], p.harmonics[env]
        )


@wp.func
def measure_arc_length(c: Courses, env: int) -> wp.float32:
    """``arc_length[env, i]``: length of the closed polyline from point 0 to point ``i``, i <= P.

    Returns the lap length ``arc_length[env, P]``.
    """
    num_points = c.centerline.shape[1]
    total = wp.float32(0.0)
    c.arc_length[env, 0] = total
    for i in range(num_points):
        step = c.centerline[env, (i + 1) % num_points] - c.centerline[env, i]
        total = total + wp.length(step)
        c.arc_length[env, i + 1] = total
    return total


@wp.func
def needed_checkpoints(length: wp.float32, spacing: wp.float32, cap: wp.int32) -> wp.int32:
    """``ceil(length / spacing)``, or ``cap + 1`` when that exceeds ``cap``; 0 for bad input."""
    if not (spacing > 0.0) or not wp.isfinite(length):
        return 0
    ratio = length / spacing
    if not (ratio <= wp.float32(cap)):
        return cap + 1
    return wp.int32(wp.ceil(ratio))


@wp.func
def find_segment(
    arc_length: wp.array2d(dtype=wp.float32), env: wp.int32, s: wp.float32
) -> wp.int32:
    """Largest ``i < P`` with ``arc_length[env, i] <= s`` (binary search)."""
    lo = wp.int32(0)
    hi = arc_length.shape[1] - 2
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if arc_length[env, mid] <= s:
            lo = mid
        else:
            hi = mid - 1
    return lo


@wp.func
def point_and_tangent(c: Courses, env: int, s: wp.float32):
    """Point and unit direction (0 if degenerate) of the centerline at arc length ``s``.

    The point is linear along the segment containing ``s``.
    """
    i = find_segment(c.arc_length, env, s)
    a = c.centerline[env, i]
    b = c.centerline[env, (i + 1) % c.centerline.shape[1]]
    start = c.arc_length[env, i]
    seg = c.arc_length[env, i + 1] - start
    t = wp.float32(0.0)
    if seg > 0.0:
        t = wp.clamp((s - start) / seg, 0.0, 1.0)
    edge = b - a
    size = wp.length(edge)
    tangent = wp.vec2f(0.0, 0.0)
    if size > 0.0:
        tangent = edge / size
    return a + t * edge, tangent


@wp.func
def place_gates(c: Courses, env: int, lap: wp.float32, even: int):
    """Checkpoint ``j`` and the two posts of gate ``j`` for ``j < count``; unused slots zero.

    Checkpoint ``j`` sits at arc length ``j * checkpoint_spacing``, or with ``even`` at
    ``j * lap / checkpoint_count`` (so that the last gate never sits just before gate 0). Gate
    ``j``'s left (right) post is checkpoint ``j`` plus (minus) ``gate_width / 2`` times the left
    normal of the centerline segment the checkpoint lies on.
    """
    count = c.checkpoint_count[env]
    step = c.params.checkpoint_spacing[env]
    if even != 0 and count > 0:
        step = lap / wp.float32(count)
    half = 0.5 * c.params.gate_width[env]
    for j in range(c.checkpoints.shape[1]):
        center = wp.vec2f(0.0, 0.0)
        left = center
        right = center
        if j < count:
            center, tangent = point_and_tangent(c, env, wp.float32(j) * step)
            normal = wp.vec2f(-tangent[1], tangent[0])
            left = center + half * normal
            right = center - half * normal
        c.checkpoints[env, j] = center
        c.posts[env, j, 0] = left
        c.posts[env, j, 1] = right
