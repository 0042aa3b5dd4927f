"""Gates mode of the course env: the gates the car goes through in order, the posts it hits.

A move counts the next gate when it goes through it forwards between its posts, and is out when it
comes close to a post (:func:`gates_progress`); the observation places the car against the gates'
centerline and the next gate's posts (:func:`observe_gates`).
"""

from __future__ import annotations

import warp as wp

from torchrl_ext.envs.course._kernels.car import (
    HEADING,
    PASSED,
    SPEED,
    Car,
    Outputs,
    X,
    Y,
    arc_change,
    car_frame,
    wrap_angle,
    write_progress,
)
from torchrl_ext.envs.course._kernels.courses import Courses
from torchrl_ext.envs.course._kernels.gates import gate_frame, hits_post

GATES_OBSERVATION_SIZE = 8
"""Observation size in gates mode: speed, heading error, lateral offset, next gate's posts
(4 numbers) and the distance to the next gate."""


@wp.func
def passes_gate(
    posts: wp.array3d(dtype=wp.vec2f), i: int, gate: int, a: wp.vec2f, b: wp.vec2f
) -> wp.bool:
    """The move ``a -> b`` goes through gate ``gate`` forwards, between its posts.

    Forwards: ``a`` strictly behind the bar's line and ``b`` on or past it (the direction of
    travel is the bar's left-to-right direction turned a quarter counter-clockwise); between
    the posts: the point where the move meets the line lies on the bar, ends included.
    """
    left = posts[i, gate, 0]
    right = posts[i, gate, 1]
    along = right - left
    forward = wp.vec2f(-along[1], along[0])
    behind = wp.dot(a - left, forward)
    ahead = wp.dot(b - left, forward)
    if not (behind < 0.0 and ahead >= 0.0):
        return False
    q = a + (behind / (behind - ahead)) * (b - a)
    u = wp.dot(q - left, along)
    return u >= 0.0 and u <= wp.dot(along, along)


@wp.func
def gates_progress(car: Car, course: Courses, i: int, a: wp.vec2f, collision: wp.float32):
    """Gates mode: count the next gate if the move from ``a`` went through it, detect post hits.

    Only the next gate in order counts (gate ``passed + 1`` modulo the gate count; gate 0, the
    start, is the last of a lap); going through any other gate counts nothing. A post is hit
    when the move passes closer than ``collision`` to it (``OUT`` is set). The car's frame on
    the gates' centerline (:func:`gate_frame`) gives its arc position; the travel grows by its
    change, wrapped across the start as in track mode.
    """
    count = wp.max(course.checkpoint_count[i], 1)
    b = wp.vec2f(car.pose[i, X], car.pose[i, Y])
    passed = car.counts[i, PASSED]
    passes = wp.where(passes_gate(course.posts, i, (passed + 1) % count, a, b), 1, 0)
    s, _lateral, seg, lap_length = gate_frame(course.checkpoints, i, count, b)
    out = wp.where(hits_post(course.posts, i, count, a, b, collision), 1, 0)
    delta = arc_change(car.track, i, s, lap_length)
    write_progress(car, i, s, delta, passed + passes, passes, out, seg)


@wp.func
def observe_gates(car: Car, course: Courses, i: int, ok: wp.bool, gap: wp.float32, out: Outputs):
    """Gates mode's observation row: speed, heading error, lateral offset, posts, then ``gap``.

    The heading error and the signed lateral offset are against the gates' centerline segment
    nearest to the car; the next gate's left and right posts are in the car's frame (``x``
    ahead, ``y`` left).
    """
    count = wp.max(course.checkpoint_count[i], 1)
    p = wp.vec2f(car.pose[i, X], car.pose[i, Y])
    heading = car.pose[i, HEADING]
    _s, lateral, seg, _lap = gate_frame(course.checkpoints, i, count, p)
    tangent = course.checkpoints[i, (seg + 1) % count] - course.checkpoints[i, seg]
    error = wrap_angle(heading - wp.atan2(tangent[1], tangent[0]))
    gate = (car.counts[i, PASSED] + 1) % count
    left = car_frame(p, heading, course.posts[i, gate, 0])
    right = car_frame(p, heading, course.posts[i, gate, 1])
    values = wp.vector(
        car.pose[i, SPEED], error, lateral, left[0], left[1], right[0], right[1], gap
    )
    for k in range(GATES_OBSERVATION_SIZE):
        out.observation[i, k] = wp.where(ok, values[k], 0.0)
