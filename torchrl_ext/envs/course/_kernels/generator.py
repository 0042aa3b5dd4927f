"""Warp kernels of the course generator.

A masked regeneration is one :func:`rebuild` launch: one thread per env returns at once where the
mask is 0, so the other envs' arrays stay bitwise untouched and the launch can be recorded into a
graph whatever the mask holds at replay time. Each stage of a rebuild (draws, centerline, arc
length, checkpoints, gates, validity) is a ``wp.func``; the arrays arrive as one :class:`Courses`.

Randomness is counter based: the uniform number ``j`` of a course is a 64-bit hash of the course's
effective seed and ``j`` (:func:`uniform`), so a course depends only on ``(seed, epoch)`` and its
parameters, never on the env index, the batch size or the launch order.
"""

from __future__ import annotations

from typing import get_type_hints

import warp as wp

from torchrl_ext.envs._kernels.common import array_struct
from torchrl_ext.envs.course.config import MAX_HARMONICS, CourseParams

NUM_DRAWS = 2 * MAX_HARMONICS
MIN_CHECKPOINTS = 2

DEFECT_SELF_INTERSECTING = wp.constant(1)
DEFECT_TIGHT_TURN = wp.constant(2)
DEFECT_TOO_FEW_CHECKPOINTS = wp.constant(4)
DEFECT_TOO_MANY_CHECKPOINTS = wp.constant(8)
DEFECT_BAD_PARAMS = wp.constant(16)
DEFECT_CROSSING_GATES = wp.constant(32)

EPOCH_KEEP = wp.constant(0)
EPOCH_ADVANCE = wp.constant(1)
EPOCH_RESTART = wp.constant(2)

_MIX_1 = wp.constant(wp.uint64(0xBF58476D1CE4E5B9))
_MIX_2 = wp.constant(wp.uint64(0x94D049BB133111EB))
_GOLDEN = wp.constant(wp.uint64(0x9E3779B97F4A7C15))
_TWO_PI = wp.constant(6.283185307179586)
_INV_2_POW_24 = wp.constant(5.9604644775390625e-08)
_MAX_HARMONICS = wp.constant(MAX_HARMONICS)
_MIN_CHECKPOINTS = wp.constant(MIN_CHECKPOINTS)


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


@wp.func
def mix64(z: wp.uint64) -> wp.uint64:
    """SplitMix64 finalizer: a bijective 64-bit mix."""
    a = (z ^ (z >> wp.uint64(30))) * _MIX_1
    b = (a ^ (a >> wp.uint64(27))) * _MIX_2
    return b ^ (b >> wp.uint64(31))


@wp.func
def effective_seed(seed: wp.int64, epoch: wp.int64) -> wp.uint64:
    """The seed itself at epoch 0, a hash of ``(seed, epoch)`` afterwards (bits as uint64)."""
    s = wp.uint64(seed)
    if epoch == wp.int64(0):
        return s
    return mix64(mix64(s) ^ (wp.uint64(epoch) * _GOLDEN))


@wp.func
def uniform(key: wp.uint64, j: wp.int32) -> wp.float32:
    """Uniform number ``j`` in ``[0, 1)`` of the stream ``key``, on a 2**-24 grid."""
    h = mix64(mix64(key) + wp.uint64(j + 1) * _GOLDEN)
    return wp.float32(h >> wp.uint64(40)) * _INV_2_POW_24


@wp.kernel
def clear_flag(flag: wp.array(dtype=wp.int32)):
    """Set ``flag[0] = 0``."""
    flag[0] = 0


@wp.kernel
def any_masked(mask: wp.array(dtype=wp.int32), flag: wp.array(dtype=wp.int32)):
    """Set ``flag[0] = 1`` if any mask entry is nonzero (every writer writes the same value)."""
    env = wp.tid()
    if mask[env] != 0:
        flag[0] = 1


@wp.func
def commit_params(next_params: Params, c: Courses, env: int, epoch_change: int):
    """Step the epoch (keep, advance or restart at 0), commit the next-course parameters.

    ``generation`` becomes the new epoch.
    """
    epoch = c.epoch[env]
    if epoch_change == EPOCH_ADVANCE:
        epoch = epoch + wp.int64(1)
    if epoch_change == EPOCH_RESTART:
        epoch = wp.int64(0)
    c.epoch[env] = epoch
    c.generation[env] = epoch
    p = c.params
    p.scale[env] = next_params.scale[env]
    p.roughness[env] = next_params.roughness[env]
    p.harmonics[env] = next_params.harmonics[env]
    p.width[env] = next_params.width[env]
    p.checkpoint_spacing[env] = next_params.checkpoint_spacing[env]
    p.gate_width[env] = next_params.gate_width[env]


@wp.func
def draw_coefficients(c: Courses, env: int):
    """Draw the uniform numbers ``coefficients[env, j]`` of env ``env``'s course."""
    key = effective_seed(c.seed[env], c.epoch[env])
    for j in range(c.coefficients.shape[1]):
        c.coefficients[env, j] = uniform(key, j)


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


@wp.kernel
def rebuild(
    mask: wp.array(dtype=wp.int32),
    epoch_change: int,
    next_params: Params,
    c: Courses,
    max_checkpoints: int,
    gates: int,
):
    """Rebuild the masked envs' courses, from the epoch to the validity, one thread per env.

    At most ``max_checkpoints`` checkpoints; ``gates`` spaces them evenly and checks the gates.
    """
    env = wp.tid()
    if mask[env] == 0:
        return
    commit_params(next_params, c, env, epoch_change)
    draw_coefficients(c, env)
    build_centerline(c, env)
    lap = measure_arc_length(c, env)
    needed = needed_checkpoints(lap, c.params.checkpoint_spacing[env], max_checkpoints)
    c.checkpoint_count[env] = wp.min(needed, max_checkpoints)
    place_gates(c, env, lap, gates)
    check_validity(c, env, needed, max_checkpoints, gates)


# ---------------------------------------------------------------- contacts with gates


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
