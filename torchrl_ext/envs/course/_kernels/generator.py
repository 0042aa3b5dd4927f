"""Warp kernels of the course generator, one job each.

Every per-env kernel takes the regeneration ``mask`` first and returns at once for an env whose
mask entry is 0, so a masked regeneration leaves the other envs' arrays bitwise untouched and can be
recorded into a graph whatever the mask holds at replay time.

Randomness is counter based: the uniform number ``j`` of a course is a 64-bit hash of the course's
effective seed and ``j`` (:func:`uniform`), so a course depends only on ``(seed, epoch)`` and its
parameters, never on the env index, the batch size or the launch order.
"""

from __future__ import annotations

import warp as wp

MAX_HARMONICS = 8
"""Highest Fourier harmonic of the radius; every course draws ``2 * MAX_HARMONICS`` numbers."""

NUM_DRAWS = 2 * MAX_HARMONICS
MIN_CHECKPOINTS = 2

DEFECT_SELF_INTERSECTING = wp.constant(1)
DEFECT_TIGHT_TURN = wp.constant(2)
DEFECT_TOO_FEW_CHECKPOINTS = wp.constant(4)
DEFECT_TOO_MANY_CHECKPOINTS = wp.constant(8)
DEFECT_BAD_PARAMS = wp.constant(16)
DEFECT_CROSSING_GATES = wp.constant(32)

_MIX_1 = wp.constant(wp.uint64(0xBF58476D1CE4E5B9))
_MIX_2 = wp.constant(wp.uint64(0x94D049BB133111EB))
_GOLDEN = wp.constant(wp.uint64(0x9E3779B97F4A7C15))
_TWO_PI = wp.constant(6.283185307179586)
_INV_2_POW_24 = wp.constant(5.9604644775390625e-08)
_MAX_HARMONICS = wp.constant(MAX_HARMONICS)
_MIN_CHECKPOINTS = wp.constant(MIN_CHECKPOINTS)


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


# Warp reads each kernel's inputs from its signature, so kernels sharing inputs repeat them.
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


@wp.kernel
def step_epoch(mask: wp.array(dtype=wp.int32), advance: wp.int32, epoch: wp.array(dtype=wp.int64)):
    """Add one to the epoch of the masked envs with ``advance``, else set it to 0."""
    env = wp.tid()
    if mask[env] == 0:
        return
    epoch[env] = wp.where(advance != 0, epoch[env] + wp.int64(1), wp.int64(0))


@wp.kernel
def commit_params(
    mask: wp.array(dtype=wp.int32),
    epoch: wp.array(dtype=wp.int64),
    param_scale: wp.array(dtype=wp.float32),
    param_roughness: wp.array(dtype=wp.float32),
    param_harmonics: wp.array(dtype=wp.int32),
    param_width: wp.array(dtype=wp.float32),
    param_spacing: wp.array(dtype=wp.float32),
    param_gate_width: wp.array(dtype=wp.float32),
    generation: wp.array(dtype=wp.int64),
    scale: wp.array(dtype=wp.float32),
    roughness: wp.array(dtype=wp.float32),
    harmonics: wp.array(dtype=wp.int32),
    width: wp.array(dtype=wp.float32),
    spacing: wp.array(dtype=wp.float32),
    gate_width: wp.array(dtype=wp.float32),
):
    """Copy the next-course parameters into the course of the masked envs; generation = epoch."""
    env = wp.tid()
    if mask[env] == 0:
        return
    generation[env] = epoch[env]
    scale[env] = param_scale[env]
    roughness[env] = param_roughness[env]
    harmonics[env] = param_harmonics[env]
    width[env] = param_width[env]
    spacing[env] = param_spacing[env]
    gate_width[env] = param_gate_width[env]


@wp.kernel
def draw_coefficients(
    mask: wp.array(dtype=wp.int32),
    seed: wp.array(dtype=wp.int64),
    epoch: wp.array(dtype=wp.int64),
    coefficients: wp.array2d(dtype=wp.float32),
):
    """Draw the uniform numbers ``coefficients[env, j]`` of the masked envs' courses."""
    env = wp.tid()
    if mask[env] == 0:
        return
    key = effective_seed(seed[env], epoch[env])
    for j in range(coefficients.shape[1]):
        coefficients[env, j] = uniform(key, j)


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


@wp.kernel
def build_centerline(
    mask: wp.array(dtype=wp.int32),
    coefficients: wp.array2d(dtype=wp.float32),
    scale: wp.array(dtype=wp.float32),
    roughness: wp.array(dtype=wp.float32),
    harmonics: wp.array(dtype=wp.int32),
    centerline: wp.array2d(dtype=wp.vec2f),
):
    """Centerline point ``i`` of the masked envs at angle ``2 pi i / P`` (:func:`centerline_point`).

    One thread per env: an unmasked env costs one mask read, whatever ``P``.
    """
    env = wp.tid()
    if mask[env] == 0:
        return
    num_points = centerline.shape[1]
    step = _TWO_PI / wp.float32(num_points)
    for i in range(num_points):
        theta = wp.float32(i) * step
        centerline[env, i] = centerline_point(
            coefficients, env, theta, scale[env], roughness[env], harmonics[env]
        )


@wp.kernel
def measure_arc_length(
    mask: wp.array(dtype=wp.int32),
    centerline: wp.array2d(dtype=wp.vec2f),
    arc_length: wp.array2d(dtype=wp.float32),
):
    """``arc_length[env, i]``: length of the closed polyline from point 0 to point ``i``, i <= P."""
    env = wp.tid()
    if mask[env] == 0:
        return
    num_points = centerline.shape[1]
    total = wp.float32(0.0)
    arc_length[env, 0] = total
    for i in range(num_points):
        step = centerline[env, (i + 1) % num_points] - centerline[env, i]
        total = total + wp.length(step)
        arc_length[env, i + 1] = total


@wp.func
def needed_checkpoints(length: wp.float32, spacing: wp.float32, cap: wp.int32) -> wp.int32:
    """``ceil(length / spacing)``, or ``cap + 1`` when that exceeds ``cap``; 0 for bad input."""
    if not (spacing > 0.0) or not wp.isfinite(length):
        return 0
    ratio = length / spacing
    if not (ratio <= wp.float32(cap)):
        return cap + 1
    return wp.int32(wp.ceil(ratio))


@wp.kernel
def count_checkpoints(
    mask: wp.array(dtype=wp.int32),
    arc_length: wp.array2d(dtype=wp.float32),
    spacing: wp.array(dtype=wp.float32),
    max_checkpoints: wp.int32,
    checkpoint_count: wp.array(dtype=wp.int32),
):
    """Number of checkpoints ``j * spacing < length``, at most ``max_checkpoints``."""
    env = wp.tid()
    if mask[env] == 0:
        return
    length = arc_length[env, arc_length.shape[1] - 1]
    needed = needed_checkpoints(length, spacing[env], max_checkpoints)
    checkpoint_count[env] = wp.min(needed, max_checkpoints)


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
def segment_at(
    centerline: wp.array2d(dtype=wp.vec2f),
    arc_length: wp.array2d(dtype=wp.float32),
    env: wp.int32,
    s: wp.float32,
):
    """Ends ``(a, b)`` of the centerline segment containing arc length ``s``, and its index."""
    i = find_segment(arc_length, env, s)
    return centerline[env, i], centerline[env, (i + 1) % centerline.shape[1]], i


@wp.func
def point_at(
    centerline: wp.array2d(dtype=wp.vec2f),
    arc_length: wp.array2d(dtype=wp.float32),
    env: wp.int32,
    s: wp.float32,
) -> wp.vec2f:
    """The centerline point at arc length ``s`` (linear along the segment containing it)."""
    a, b, i = segment_at(centerline, arc_length, env, s)
    start = arc_length[env, i]
    seg = arc_length[env, i + 1] - start
    t = wp.float32(0.0)
    if seg > 0.0:
        t = wp.clamp((s - start) / seg, 0.0, 1.0)
    return a + t * (b - a)


@wp.func
def checkpoint_step(
    arc_length: wp.array2d(dtype=wp.float32),
    env: wp.int32,
    spacing: wp.float32,
    count: wp.int32,
    even: wp.int32,
) -> wp.float32:
    """Arc length between checkpoints: ``spacing``, or with ``even`` the lap over ``count``.

    Gates are spaced evenly so that the last one never sits just before gate 0.
    """
    if even != 0 and count > 0:
        return arc_length[env, arc_length.shape[1] - 1] / wp.float32(count)
    return spacing


@wp.kernel
def place_checkpoints(
    mask: wp.array(dtype=wp.int32),
    centerline: wp.array2d(dtype=wp.vec2f),
    arc_length: wp.array2d(dtype=wp.float32),
    spacing: wp.array(dtype=wp.float32),
    checkpoint_count: wp.array(dtype=wp.int32),
    even: wp.int32,
    checkpoints: wp.array2d(dtype=wp.vec2f),
):
    """Checkpoint ``j`` at arc length ``j * step`` (:func:`checkpoint_step`); unused slots zero."""
    env = wp.tid()
    if mask[env] == 0:
        return
    count = wp.min(checkpoint_count[env], checkpoints.shape[1])
    step = checkpoint_step(arc_length, env, spacing[env], count, even)
    for j in range(checkpoints.shape[1]):
        if j < count:
            checkpoints[env, j] = point_at(centerline, arc_length, env, wp.float32(j) * step)
        else:
            checkpoints[env, j] = wp.vec2f(0.0, 0.0)


@wp.func
def tangent_at(
    centerline: wp.array2d(dtype=wp.vec2f),
    arc_length: wp.array2d(dtype=wp.float32),
    env: wp.int32,
    s: wp.float32,
) -> wp.vec2f:
    """Unit direction of the centerline segment containing arc length ``s`` (0 if degenerate)."""
    a, b, _i = segment_at(centerline, arc_length, env, s)
    edge = b - a
    size = wp.length(edge)
    if size > 0.0:
        return edge / size
    return wp.vec2f(0.0, 0.0)


@wp.kernel
def place_gates(
    mask: wp.array(dtype=wp.int32),
    centerline: wp.array2d(dtype=wp.vec2f),
    arc_length: wp.array2d(dtype=wp.float32),
    spacing: wp.array(dtype=wp.float32),
    checkpoint_count: wp.array(dtype=wp.int32),
    gate_width: wp.array(dtype=wp.float32),
    even: wp.int32,
    posts: wp.array3d(dtype=wp.vec2f),
):
    """The two posts of each gate; unused slots zero.

    Gate ``j`` stands at checkpoint ``j``: its left (right) post is the checkpoint plus (minus)
    ``gate_width / 2`` times the left normal of the centerline segment the checkpoint lies on.
    """
    env = wp.tid()
    if mask[env] == 0:
        return
    count = wp.min(checkpoint_count[env], posts.shape[1])
    step = checkpoint_step(arc_length, env, spacing[env], count, even)
    half = 0.5 * gate_width[env]
    for j in range(posts.shape[1]):
        left = wp.vec2f(0.0, 0.0)
        right = wp.vec2f(0.0, 0.0)
        if j < count:
            s = wp.float32(j) * step
            center = point_at(centerline, arc_length, env, s)
            t = tangent_at(centerline, arc_length, env, s)
            normal = wp.vec2f(-t[1], t[0])
            left = center + half * normal
            right = center - half * normal
        posts[env, j, 0] = left
        posts[env, j, 1] = right


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
def params_defect(
    scale: wp.float32,
    roughness: wp.float32,
    harmonics: wp.int32,
    width: wp.float32,
    spacing: wp.float32,
    gate_width: wp.float32,
) -> wp.int32:
    """``DEFECT_BAD_PARAMS`` for non-finite or out-of-range parameters, else 0."""
    ok = scale > 0.0 and wp.isfinite(scale) and roughness >= 0.0 and wp.isfinite(roughness)
    ok = ok and width > 0.0 and wp.isfinite(width) and spacing > 0.0 and wp.isfinite(spacing)
    ok = ok and gate_width > 0.0 and wp.isfinite(gate_width)
    ok = ok and harmonics >= 1 and harmonics <= _MAX_HARMONICS
    if ok:
        return 0
    return DEFECT_BAD_PARAMS


@wp.kernel
def check_validity(
    mask: wp.array(dtype=wp.int32),
    centerline: wp.array2d(dtype=wp.vec2f),
    arc_length: wp.array2d(dtype=wp.float32),
    scale: wp.array(dtype=wp.float32),
    roughness: wp.array(dtype=wp.float32),
    harmonics: wp.array(dtype=wp.int32),
    width: wp.array(dtype=wp.float32),
    spacing: wp.array(dtype=wp.float32),
    gate_width: wp.array(dtype=wp.float32),
    checkpoint_count: wp.array(dtype=wp.int32),
    posts: wp.array3d(dtype=wp.vec2f),
    max_checkpoints: wp.int32,
    gates: wp.int32,
    defects: wp.array(dtype=wp.int32),
    valid: wp.array(dtype=wp.int32),
):
    """Write the defect bits of the masked envs' courses and ``valid = (defects == 0)``.

    A track (``gates == 0``) is checked for tight turns against its width, a gates course for
    crossing bars; both for a self-crossing centerline, the checkpoint count and the parameters.
    """
    env = wp.tid()
    if mask[env] == 0:
        return
    bits = params_defect(
        scale[env], roughness[env], harmonics[env], width[env], spacing[env], gate_width[env]
    )
    if not is_simple(centerline, env):
        bits = bits | DEFECT_SELF_INTERSECTING
    if gates == 0:
        if has_tight_turn(centerline, env, width[env]):
            bits = bits | DEFECT_TIGHT_TURN
    else:
        count = wp.min(checkpoint_count[env], posts.shape[1])
        if gates_cross(posts, env, count):
            bits = bits | DEFECT_CROSSING_GATES
    length = arc_length[env, arc_length.shape[1] - 1]
    needed = needed_checkpoints(length, spacing[env], max_checkpoints)
    if needed < _MIN_CHECKPOINTS:
        bits = bits | DEFECT_TOO_FEW_CHECKPOINTS
    if needed > max_checkpoints:
        bits = bits | DEFECT_TOO_MANY_CHECKPOINTS
    defects[env] = bits
    valid[env] = wp.where(bits == 0, 1, 0)


# ---------------------------------------------------------------- contacts with gates


@wp.func
def gate_frame(
    checkpoints: wp.array2d(dtype=wp.vec2f), env: wp.int32, count: wp.int32, p: wp.vec2f
):
    """Locate ``p`` on the closed polyline through the first ``count`` gate centers.

    Returns ``(progress, lateral, segment)``: the arc length from gate 0 of the point of the
    polyline nearest to ``p`` (nearest of all segments; segment ``k`` joins gate ``k`` to gate
    ``k + 1``, the last one back to gate 0), the signed distance of ``p`` from that segment
    (positive on the left, the inside of a counter-clockwise course) and ``k``.
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
    return progress, lateral, best


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
    checkpoints: wp.array2d(dtype=wp.vec2f),
    checkpoint_count: wp.array(dtype=wp.int32),
    positions: wp.array(dtype=wp.vec2f),
    frame: wp.array(dtype=wp.vec2f),
):
    """``frame[env] = (progress, lateral)`` of ``positions[env]`` (:func:`gate_frame`)."""
    env = wp.tid()
    progress, lateral, _seg = gate_frame(checkpoints, env, checkpoint_count[env], positions[env])
    frame[env] = wp.vec2f(progress, lateral)


@wp.kernel
def touch_posts(
    posts: wp.array3d(dtype=wp.vec2f),
    checkpoint_count: wp.array(dtype=wp.int32),
    positions: wp.array(dtype=wp.vec2f),
    collision: wp.float32,
    hit: wp.array(dtype=wp.int32),
):
    """``hit[env] = 1`` if ``positions[env]`` is closer than ``collision`` to a post, else 0."""
    env = wp.tid()
    p = positions[env]
    hit[env] = wp.where(hits_post(posts, env, checkpoint_count[env], p, p, collision), 1, 0)
