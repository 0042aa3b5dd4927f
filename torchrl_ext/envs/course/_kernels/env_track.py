"""Track mode of the course env: the car on the centerline, its checkpoints, its range readings.

The car is projected on the centerline segment nearest to it (searched near the previous one
first); its arc position gives its progress and the checkpoints it passes (:func:`track_progress`).
Its observation casts rays to the track edges (:func:`observe_track`).
"""

from __future__ import annotations

import warp as wp

from torchrl_ext.envs.course._kernels.car import (
    HEADING,
    PASSED,
    SEGMENT,
    SPEED,
    TRAVEL,
    Car,
    CarParams,
    Outputs,
    X,
    Y,
    arc_change,
    wrap_angle,
    write_progress,
)
from torchrl_ext.envs.course._kernels.courses import Courses
from torchrl_ext.envs.course._kernels.gates import segment_param

_WINDOW = wp.constant(3)
"""Centerline segments searched on each side of the previous nearest one when casting rays."""
_MARCH_STEPS = wp.constant(24)
_MIN_STEP = wp.constant(1.0 / 64.0)
"""Smallest march step, as a fraction of the range: grazing rays advance instead of stalling."""
_MAX_PASSES = wp.constant(4)
_HIT = wp.constant(1.0e-3)


@wp.func
def nearest_segment(
    centerline: wp.array2d(dtype=wp.vec2f), env: int, p: wp.vec2f, center: int, radius: int
):
    """Nearest of the segments ``center - radius .. center + radius`` (cyclic) to ``p``.

    Returns ``(segment, distance, t)``; pass ``radius >= P`` to search every segment.
    """
    num_points = centerline.shape[1]
    count = wp.min(2 * radius + 1, num_points)
    first = center - radius
    if count == num_points:
        first = 0
    best = wp.int32(0)
    best_d2 = wp.float32(3.0e38)
    best_t = wp.float32(0.0)
    for k in range(count):
        i = ((first + k) % num_points + num_points) % num_points
        a = centerline[env, i]
        b = centerline[env, (i + 1) % num_points]
        t = segment_param(a, b, p)
        gap = p - (a + t * (b - a))
        d2 = wp.dot(gap, gap)
        if d2 < best_d2:
            best = i
            best_d2 = d2
            best_t = t
    return best, wp.sqrt(best_d2), best_t


@wp.func
def cast_ray(
    centerline: wp.array2d(dtype=wp.vec2f),
    env: int,
    origin: wp.vec2f,
    direction: wp.vec2f,
    segment: int,
    half_width: wp.float32,
    max_range: wp.float32,
) -> wp.float32:
    """Distance from ``origin`` along ``direction`` to the track edge, at most ``max_range``.

    The nearest segment is searched near the previous one as the ray advances (a local search:
    parts of the course farther along never shorten a reading wrongly, they are just not seen).
    Sphere tracing on the track's distance field ``half_width - d(p, centerline)`` with steps of
    at least ``max_range / 64``: exact to ``1e-3`` where the ray meets the edge head-on, to
    ``max_range / 64`` at grazing incidence; 0 when the origin is off the track.
    """
    t = wp.float32(0.0)
    center = segment
    for _ in range(_MARCH_STEPS):
        q = origin + t * direction
        center, d, _t = nearest_segment(centerline, env, q, center, _WINDOW)
        gap = half_width - d
        if gap < _HIT or t >= max_range:
            return wp.clamp(t, 0.0, max_range)
        t = t + wp.max(gap, _MIN_STEP * max_range)
    return wp.min(t, max_range)


@wp.func
def arc_position(
    arc_length: wp.array2d(dtype=wp.float32), env: int, segment: int, t: wp.float32
) -> wp.float32:
    """Arc length of the point at parameter ``t`` of centerline segment ``segment``."""
    start = arc_length[env, segment]
    return start + t * (arc_length[env, segment + 1] - start)


@wp.func
def checkpoint_arc(
    passed: int, count: int, spacing: wp.float32, lap_length: wp.float32
) -> wp.float32:
    """Distance travelled at which the ``passed + 1``-th checkpoint of the episode is passed.

    Checkpoint ``j`` of a lap sits at arc length ``j * spacing``; the lap ends at the start line
    (checkpoint 0 of the next lap, at ``lap_length``).
    """
    lap = passed // count
    j = passed % count + 1
    offset = lap_length
    if j < count:
        offset = wp.float32(j) * spacing
    return wp.float32(lap) * lap_length + offset


@wp.func
def track_progress(car: Car, course: Courses, i: int):
    """Project the car on the centerline; count checkpoints passed and out-of-bounds contact.

    The projection searches the segments near the previous one first, so a car on the track
    follows it continuously even where two parts of the course come close; a car that left the
    track is projected on the nearest segment of all.

    The signed travel grows by the change of arc position (wrapped across the start line); the
    next checkpoint is passed when the travel reaches its :func:`checkpoint_arc`. Driving back
    never un-passes a checkpoint.
    """
    centerline = course.centerline
    num_points = centerline.shape[1]
    half_width = 0.5 * course.params.width[i]
    p = wp.vec2f(car.pose[i, X], car.pose[i, Y])
    seg, d, t = nearest_segment(centerline, i, p, car.counts[i, SEGMENT], _WINDOW)
    if d > half_width:
        seg, d, t = nearest_segment(centerline, i, p, 0, num_points)
    lap_length = course.arc_length[i, num_points]
    s = arc_position(course.arc_length, i, seg, t)
    delta = arc_change(car.track, i, s, lap_length)
    travel = car.track[i, TRAVEL] + delta
    passed = car.counts[i, PASSED]
    count = wp.max(course.checkpoint_count[i], 1)  # a valid course has >= 2; never divide by 0
    spacing = course.params.checkpoint_spacing[i]
    passes = wp.int32(0)
    for _ in range(_MAX_PASSES):
        if travel >= checkpoint_arc(passed, count, spacing, lap_length):
            passed = passed + 1
            passes = passes + 1
    out = wp.where(d > half_width, 1, 0)
    write_progress(car, i, s, delta, passed, passes, out, seg)


@wp.func
def observe_track(
    params: CarParams, car: Car, course: Courses, i: int, ok: wp.bool, gap: wp.float32, out: Outputs
):
    """Track mode's observation row: range readings, speed, heading error, then ``gap``.

    The rays spread evenly over ``[-spread, spread]`` around the heading; the heading error is
    against the segment under the car.
    """
    centerline = course.centerline
    num_points = centerline.shape[1]
    num_rays = out.observation.shape[1] - 3
    p = wp.vec2f(car.pose[i, X], car.pose[i, Y])
    heading = car.pose[i, HEADING]
    seg = car.counts[i, SEGMENT]
    half_width = 0.5 * course.params.width[i]
    for r in range(num_rays):
        angle = heading
        if num_rays > 1:
            frac = wp.float32(r) / wp.float32(num_rays - 1)
            angle = heading + params.ray_spread * (2.0 * frac - 1.0)
        direction = wp.vec2f(wp.cos(angle), wp.sin(angle))
        reading = wp.float32(0.0)
        if ok:
            reading = cast_ray(centerline, i, p, direction, seg, half_width, params.max_range)
        out.observation[i, r] = reading
    tangent = centerline[i, (seg + 1) % num_points] - centerline[i, seg]
    error = wrap_angle(heading - wp.atan2(tangent[1], tangent[0]))
    out.observation[i, num_rays] = wp.where(ok, car.pose[i, SPEED], 0.0)
    out.observation[i, num_rays + 1] = wp.where(ok, error, 0.0)
    out.observation[i, num_rays + 2] = wp.where(ok, gap, 0.0)
