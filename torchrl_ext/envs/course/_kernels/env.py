"""Warp kernels of the course env: the step, and the respawn with the root observations.

A step is one :func:`step` launch (move, progress, reward, done flags, auto-reset masks and the
step's observation of each env); after the masked regeneration, :func:`respawn_and_observe`
restarts the episodes and writes the root observations. Track mode projects the car on the
centerline and casts rays to the track edges; gates mode counts the gates the car goes through in
order and the posts it hits. Both share the car's kinematics (:func:`drive`), the episode ends and
the respawn.

Every kernel runs one thread per env. The car's state lives in three arrays of one :class:`Car`:

- ``pose`` ``[N, 4]`` float32: ``x``, ``y``, heading (radians), speed;
- ``track`` ``[N, 3]`` float32: arc position ``s`` of the car's projection on the centerline,
  signed distance travelled along the course this episode, and its change in the last step;
- ``counts`` ``[N, 5]`` int32: checkpoints passed this episode, passed in the last step,
  out-of-bounds flag, index of the nearest centerline segment, and why the episode ended
  (``END_NONE``, ``END_RESPAWN`` or ``END_REGENERATE``).

The course arrays come from :class:`~torchrl_ext.envs.course.CourseGenerator` as one
:class:`~torchrl_ext.envs.course._kernels.generator.Courses`. Constants arrive by value in one
:data:`CarParams` struct and one :class:`Rules`, read by name.
"""

from __future__ import annotations

from dataclasses import fields

import warp as wp

from torchrl_ext.envs._kernels.common import (
    Flags,
    array_struct,
    begin_episode,
    count_step,
    param_structs,
    set_flags,
)
from torchrl_ext.envs.course._kernels.generator import (
    Courses,
    gate_frame,
    hits_post,
    segment_param,
)
from torchrl_ext.envs.course.config import CarConfig

CAR_PARAMS = param_structs("CarParams", [f.name for f in fields(CarConfig)], __name__)
"""The car and reward constants, a field per :class:`CarConfig` field (float32 and float64)."""
CarParams = CAR_PARAMS[wp.float32]

# pose columns
X, Y, HEADING, SPEED = 0, 1, 2, 3
# track columns
ARC, TRAVEL, DELTA = 0, 1, 2
# counts columns
PASSED, STEP_PASSES, OUT, SEGMENT, ENDED = 0, 1, 2, 3, 4
NUM_COUNTS = 5
# how an episode ended (counts column ENDED)
END_NONE, END_RESPAWN, END_REGENERATE = 0, 1, 2
GATES_OBSERVATION_SIZE = 8
"""Observation size in gates mode: speed, heading error, lateral offset, next gate's posts
(4 numbers) and the distance to the next gate."""

_WINDOW = wp.constant(3)
"""Centerline segments searched on each side of the previous nearest one when casting rays."""
_MARCH_STEPS = wp.constant(24)
_MIN_STEP = wp.constant(1.0 / 64.0)
"""Smallest march step, as a fraction of the range: grazing rays advance instead of stalling."""
_MAX_PASSES = wp.constant(4)
_HIT = wp.constant(1.0e-3)
_PI = wp.constant(3.14159265358979)
_TWO_PI = wp.constant(6.28318530717959)


@wp.struct
class Rules:
    """The env's integer settings and post radius."""

    laps: int
    max_steps: int
    crash_regenerates: int
    gates: int
    collision: wp.float32


Car = array_struct(
    "Car",
    {
        "pose": wp.array2d(dtype=wp.float32),
        "track": wp.array2d(dtype=wp.float32),
        "counts": wp.array2d(dtype=wp.int32),
    },
    __name__,
)
"""The cars' state: ``pose``, ``track`` and ``counts`` (see the module docstring)."""

Outputs = array_struct(
    "Outputs",
    {
        "observation": wp.array2d(dtype=wp.float32),
        "checkpoint_distance": wp.float32,
        "checkpoints_passed": wp.int32,
        "laps": wp.int32,
        "out_of_bounds": wp.bool,
        "valid": wp.bool,
    },
    __name__,
)
"""One set of observation buffers (``"next"`` or ``"root"``), by observation key."""

Ends = array_struct(
    "Ends",
    {
        "steps": wp.int32,
        "request_regenerate": wp.int32,
        "request_respawn": wp.int32,
        "reward": wp.float32,
        "flags": Flags,
        "regenerate_mask": wp.int32,
        "respawn_mask": wp.int32,
    },
    __name__,
)
"""What ends the episodes, and what a step writes about it.

``steps`` is the step counter; ``request_regenerate`` and ``request_respawn`` are the env's inputs
(read, never cleared); the step writes the reward, the three done flags (``flags``, the env's
``[N, 1]`` time slot) and the auto-reset masks ``regenerate_mask`` and ``respawn_mask``.
"""


@wp.func
def wrap_angle(a: wp.float32) -> wp.float32:
    """Wrap an angle into ``[-pi, pi)``."""
    y = wp.mod(a + _PI, _TWO_PI)
    if y < 0.0:
        y = y + _TWO_PI
    return y - _PI


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
def drive(
    pose: wp.array2d(dtype=wp.float32),
    action: wp.array2d(dtype=wp.float32),
    i: int,
    params: CarParams,
):
    """Kinematic bicycle step of car ``i``: clip ``(steer, throttle)`` to ``[-1, 1]``, move it.

    Speed follows ``v += (accel * throttle - drag * v) dt`` clipped to ``[0, max_speed]``; the
    heading turns by ``v tan(steer * max_steer) / wheelbase * dt``; the car moves ``v dt`` along
    its new heading.
    """
    dt = params.dt
    steer = wp.clamp(action[i, 0], -1.0, 1.0) * params.max_steer
    throttle = wp.clamp(action[i, 1], -1.0, 1.0)
    v = pose[i, SPEED] + (params.accel * throttle - params.drag * pose[i, SPEED]) * dt
    v = wp.clamp(v, 0.0, params.max_speed)
    heading = wrap_angle(pose[i, HEADING] + v * wp.tan(steer) / params.wheelbase * dt)
    pose[i, X] = pose[i, X] + v * wp.cos(heading) * dt
    pose[i, Y] = pose[i, Y] + v * wp.sin(heading) * dt
    pose[i, HEADING] = heading
    pose[i, SPEED] = v


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
def arc_change(
    track: wp.array2d(dtype=wp.float32), i: int, s: wp.float32, lap_length: wp.float32
) -> wp.float32:
    """Change of env ``i``'s arc position to ``s``, wrapped across the start line."""
    delta = s - track[i, ARC]
    if delta > 0.5 * lap_length:
        delta = delta - lap_length
    if delta < -0.5 * lap_length:
        delta = delta + lap_length
    return delta


@wp.func
def write_progress(
    car: Car, i: int, s: wp.float32, delta: wp.float32, passed: int, passes: int, out: int, seg: int
):
    """Store env ``i``'s arc position, travel and its change, and the step's counts."""
    car.track[i, ARC] = s
    car.track[i, TRAVEL] = car.track[i, TRAVEL] + delta
    car.track[i, DELTA] = delta
    car.counts[i, PASSED] = passed
    car.counts[i, STEP_PASSES] = passes
    car.counts[i, OUT] = out
    car.counts[i, SEGMENT] = seg


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
def move(
    action: wp.array2d(dtype=wp.float32),
    params: CarParams,
    rules: Rules,
    car: Car,
    course: Courses,
    i: int,
):
    """Drive car ``i`` and update its progress, on the track or through the gates.

    A car on an invalid course stays; its last-step progress, passes and out flag are zeroed.
    """
    if course.valid[i] == 0:
        car.track[i, DELTA] = 0.0
        car.counts[i, STEP_PASSES] = 0
        car.counts[i, OUT] = 0
    else:
        a = wp.vec2f(car.pose[i, X], car.pose[i, Y])
        drive(car.pose, action, i, params)
        if rules.gates != 0:
            gates_progress(car, course, i, a, rules.collision)
        else:
            track_progress(car, course, i)


@wp.func
def end_episode(
    params: CarParams, rules: Rules, autoreset: int, car: Car, course: Courses, ends: Ends, i: int
):
    """Reward, done flags and the auto-reset masks of env ``i`` (each entry written every step).

    Reward: checkpoints passed + ``progress_coef * travel change`` - ``crash_penalty`` if out of
    bounds, selected to 0 on an invalid course. Terminated: laps reached, out of bounds or an
    invalid course; truncated: the step limit or a request (a nonzero entry of
    ``request_regenerate`` or ``request_respawn``). A finished, invalid or time-limited episode
    (and a crash if ``crash_regenerates``, and a regeneration request) ends with a new course; a
    crash or a respawn request alone with a respawn.
    """
    counts = car.counts
    ok = course.valid[i] != 0
    out = counts[i, OUT] != 0
    finished = counts[i, PASSED] >= rules.laps * course.checkpoint_count[i]
    r = wp.float32(counts[i, STEP_PASSES]) + params.progress_coef * car.track[i, DELTA]
    if out:
        r = r - params.crash_penalty
    ends.reward[i] = wp.where(ok, r, 0.0)
    term = (not ok) or finished or out
    time_up = count_step(ends.steps, i, rules.max_steps)
    asked_regen = ends.request_regenerate[i] != 0
    trunc = time_up or asked_regen or ends.request_respawn[i] != 0
    set_flags(ends.flags, i, 0, term, trunc)
    crash_regen = out and rules.crash_regenerates != 0
    regen = (not ok) or finished or time_up or asked_regen or crash_regen
    ended = END_NONE
    if term or trunc:
        ended = wp.where(regen, END_REGENERATE, END_RESPAWN)
    counts[i, ENDED] = ended
    go = autoreset != 0 and ended != END_NONE
    ends.regenerate_mask[i] = wp.where(go and regen, 1, 0)
    ends.respawn_mask[i] = wp.where(go and not regen, 1, 0)


@wp.func
def car_frame(p: wp.vec2f, heading: wp.float32, point: wp.vec2f) -> wp.vec2f:
    """``point`` in the car's frame: ``x`` ahead, ``y`` to the left."""
    gap = point - p
    c = wp.cos(heading)
    sn = wp.sin(heading)
    return wp.vec2f(c * gap[0] + sn * gap[1], -sn * gap[0] + c * gap[1])


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


@wp.func
def observe(params: CarParams, rules: Rules, car: Car, course: Courses, i: int, out: Outputs):
    """Write env ``i``'s observation, selected to finite zeros on an invalid course.

    The distance to the next checkpoint (gate) ends a track observation and a gates one alike,
    and is the ``checkpoint_distance`` output.
    """
    ok = course.valid[i] != 0
    count = wp.max(course.checkpoint_count[i], 1)
    target = course.checkpoints[i, (car.counts[i, PASSED] + 1) % count]
    gap = wp.length(target - wp.vec2f(car.pose[i, X], car.pose[i, Y]))
    if rules.gates != 0:
        observe_gates(car, course, i, ok, gap, out)
    else:
        observe_track(params, car, course, i, ok, gap, out)
    out.checkpoint_distance[i] = wp.where(ok, gap, 0.0)
    out.checkpoints_passed[i] = wp.where(ok, car.counts[i, STEP_PASSES], 0)
    out.laps[i] = wp.where(ok, car.counts[i, PASSED] // count, 0)
    out.out_of_bounds[i] = ok and car.counts[i, OUT] != 0
    out.valid[i] = ok


@wp.kernel
def step(
    params: CarParams,
    rules: Rules,
    car: Car,
    course: Courses,
    ends: Ends,
    action: wp.array2d(dtype=wp.float32),
    autoreset: int,
    out: Outputs,
):
    """One step of every env: :func:`move`, :func:`end_episode`, :func:`observe` into ``out``."""
    i = wp.tid()
    move(action, params, rules, car, course, i)
    end_episode(params, rules, autoreset, car, course, ends, i)
    observe(params, rules, car, course, i, out)


@wp.kernel
def plan_reset(car: Car, course: Courses, ends: Ends, mask: wp.array(dtype=wp.int32)):
    """Split a reset mask: envs whose episode asked for a new course (or invalid) regenerate."""
    i = wp.tid()
    regen = mask[i] != 0 and (car.counts[i, ENDED] == END_REGENERATE or course.valid[i] == 0)
    ends.regenerate_mask[i] = wp.where(regen, 1, 0)
    ends.respawn_mask[i] = wp.where(mask[i] != 0 and not regen, 1, 0)


@wp.kernel
def respawn_and_observe(
    params: CarParams,
    rules: Rules,
    car: Car,
    course: Courses,
    ends: Ends,
    first: wp.array(dtype=wp.int32),
    second: wp.array(dtype=wp.int32),
    carry: int,
    episode: wp.array(dtype=wp.int32),
    step_out: Outputs,
    root: Outputs,
):
    """Respawn the envs set in either mask, then write every env's root observation.

    A respawned car sits at rest at centerline point 0 facing point 1; its progress, counts and
    step counter are zeroed and its episode counter advances. With ``carry`` (right after a
    step wrote ``step_out``), the other envs' root observation is a copy of their step one.
    """
    i = wp.tid()
    if first[i] != 0 or second[i] != 0:
        begin_episode(ends.steps, episode, i)
        a = course.centerline[i, 0]
        b = course.centerline[i, 1]
        car.pose[i, X] = a[0]
        car.pose[i, Y] = a[1]
        car.pose[i, HEADING] = wp.atan2(b[1] - a[1], b[0] - a[0])
        car.pose[i, SPEED] = 0.0
        for k in range(3):
            car.track[i, k] = 0.0
        for k in range(NUM_COUNTS):
            car.counts[i, k] = 0
    elif carry != 0:
        for k in range(step_out.observation.shape[1]):
            root.observation[i, k] = step_out.observation[i, k]
        root.checkpoint_distance[i] = step_out.checkpoint_distance[i]
        root.checkpoints_passed[i] = step_out.checkpoints_passed[i]
        root.laps[i] = step_out.laps[i]
        root.out_of_bounds[i] = step_out.out_of_bounds[i]
        root.valid[i] = step_out.valid[i]
        return
    observe(params, rules, car, course, i, root)
