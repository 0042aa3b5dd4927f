"""Where a point lies on a course's gates, and whether a path comes close to one of their posts.

The ``wp.func`` functions serve the course env's gates mode; :func:`locate_on_gates` and
:func:`touch_posts` are the kernels behind ``CourseGenerator.frame`` and ``hit_posts``.
"""

from __future__ import annotations

import warp as wp

from torchrl_ext.envs.course._kernels.courses import Courses


@wp.func
def gate_frame(
    checkpoints: wp.array2d(dtype=wp.vec2f), env: wp.int32, count: wp.int32, p: wp.vec2f
):
    """Locate ``p`` on the closed polyline through the first ``count`` gate centers.

    Returns ``(progress, lateral, segment, lap)``: the arc length from gate 0 of the point of
    the polyline nearest to ``p`` (nearest of all segments; segment ``k`` joins gate ``k`` to
    gate ``k + 1``, the last one back to gate 0), the signed distance of ``p`` from that segment
    (positive on the left, the inside of a counter-clockwise course), ``k`` and the length of
    the whole polyline.
    """
    n = wp.max(count, 1)
    best = wp.int32(0)
    best_d2 = wp.float32(3.0e38)
    progress = wp.float32(0.0)
    lateral = wp.float32(0.0)
    start = wp.float32(0.0)
    for k in range(n):
        a = checkpoints[env, k]
        b = checkpoints[env, (k + 1) % n]
        edge = b - a
        size = wp.length(edge)
        t = wp.float32(0.0)
        if size > 0.0:
            t = wp.clamp(wp.dot(p - a, edge) / (size * size), 0.0, 1.0)
        gap = p - (a + t * edge)
        d2 = wp.dot(gap, gap)
        if d2 < best_d2:
            best = k
            best_d2 = d2
            progress = start + t * size
            lateral = wp.float32(0.0)
            if size > 0.0:
                lateral = (edge[0] * (p[1] - a[1]) - edge[1] * (p[0] - a[0])) / size
        start = start + size
    return progress, lateral, best, start


@wp.func
def segment_param(a: wp.vec2f, b: wp.vec2f, p: wp.vec2f) -> wp.float32:
    """Parameter in ``[0, 1]`` of the point of segment ``ab`` nearest to ``p``."""
    ab = b - a
    len2 = wp.dot(ab, ab)
    t = wp.float32(0.0)
    if len2 > 0.0:
        t = wp.clamp(wp.dot(p - a, ab) / len2, 0.0, 1.0)
    return t


@wp.func
def point_segment_distance(p: wp.vec2f, a: wp.vec2f, b: wp.vec2f) -> wp.float32:
    """Distance from ``p`` to the segment ``ab`` (to ``a`` when ``a == b``)."""
    return wp.length(p - (a + segment_param(a, b, p) * (b - a)))


@wp.func
def hits_post(
    posts: wp.array3d(dtype=wp.vec2f),
    env: wp.int32,
    count: wp.int32,
    a: wp.vec2f,
    b: wp.vec2f,
    collision: wp.float32,
) -> wp.bool:
    """The path ``a -> b`` comes closer than ``collision`` to a post of the first ``count`` gates.

    ``a == b`` tests a point; a path catches a post that a fast agent would otherwise jump over.
    """
    for j in range(wp.min(count, posts.shape[1])):
        for side in range(2):
            if point_segment_distance(posts[env, j, side], a, b) < collision:
                return True
    return False


@wp.kernel
def locate_on_gates(
    c: Courses, positions: wp.array(dtype=wp.vec2f), frame: wp.array(dtype=wp.vec2f)
):
    """``frame[env] = (progress, lateral)`` of ``positions[env]`` (:func:`gate_frame`)."""
    env = wp.tid()
    progress, lateral, _seg, _lap = gate_frame(
        c.checkpoints, env, c.checkpoint_count[env], positions[env]
    )
    frame[env] = wp.vec2f(progress, lateral)


@wp.kernel
def touch_posts(
    c: Courses,
    positions: wp.array(dtype=wp.vec2f),
    collision: wp.float32,
    hit: wp.array(dtype=wp.int32),
):
    """``hit[env] = 1`` if ``positions[env]`` is closer than ``collision`` to a post, else 0."""
    env = wp.tid()
    p = positions[env]
    hit[env] = wp.where(hits_post(c.posts, env, c.checkpoint_count[env], p, p, collision), 1, 0)
