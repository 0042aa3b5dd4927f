"""Warp kernels of the course env: the step, and the respawn with the root observations.

A step is one :func:`step` launch (move, progress, reward, done flags, auto-reset masks and the
step's observation of each env); after the masked regeneration, :func:`respawn_and_observe`
restarts the episodes and writes the root observations. Track mode (``env_track``) projects the
car on the centerline and casts rays to the track edges; gates mode (``env_gates``) counts the
gates the car goes through in order and the posts it hits. Both share the car and its kinematics
(``car``), and the episode ends and the respawn, here.

Every kernel runs one thread per env. The course arrays come from
:class:`~torchrl_ext.envs.course.CourseGenerator` as one
:class:`~torchrl_ext.envs.course._kernels.courses.Courses`. Constants arrive by value in one
:data:`~torchrl_ext.envs.course._kernels.car.CarParams` struct and one :class:`Rules`, read by
name.
"""

from __future__ import annotations

import warp as wp

from torchrl_ext.envs._kernels.common import (
    Flags,
    array_struct,
    begin_episode,
    count_step,
    set_flags,
)
from torchrl_ext.envs.course._kernels.car import (
    DELTA,
    END_NONE,
    END_REGENERATE,
    END_RESPAWN,
    ENDED,
    HEADING,
    NUM_COUNTS,
    OUT,
    PASSED,
    SPEED,
    STEP_PASSES,
    Car,
    CarParams,
    Outputs,
    X,
    Y,
    drive,
)
from torchrl_ext.envs.course._kernels.courses import Courses
from torchrl_ext.envs.course._kernels.env_gates import gates_progress, observe_gates
from torchrl_ext.envs.course._kernels.env_track import observe_track, track_progress


@wp.struct
class Rules:
    """The env's integer settings and post radius."""

    laps: int
    max_steps: int
    crash_regenerates: int
    gates: int
    collision: wp.float32


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
