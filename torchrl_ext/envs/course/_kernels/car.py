"""The car of the course env: its per-env arrays, its kinematics and the progress it keeps.

The car's state lives in three arrays of one :class:`Car`:

- ``pose`` ``[N, 4]`` float32: ``x``, ``y``, heading (radians), speed;
- ``track`` ``[N, 3]`` float32: arc position ``s`` of the car's projection on the centerline,
  signed distance travelled along the course this episode, and its change in the last step;
- ``counts`` ``[N, 5]`` int32: checkpoints passed this episode, passed in the last step,
  out-of-bounds flag, index of the nearest centerline segment, and why the episode ended
  (``END_NONE``, ``END_RESPAWN`` or ``END_REGENERATE``).

:class:`Outputs` holds one set of the env's observation buffers, :data:`CarParams` the car and
reward constants (by value). :func:`drive` moves a car; :func:`arc_change` and
:func:`write_progress` keep the progress of both modes.
"""

from __future__ import annotations

from dataclasses import fields

import warp as wp

from torchrl_ext.envs._kernels.common import array_struct, param_structs
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

_PI = wp.constant(3.14159265358979)
_TWO_PI = wp.constant(6.28318530717959)


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


@wp.func
def wrap_angle(a: wp.float32) -> wp.float32:
    """Wrap an angle into ``[-pi, pi)``."""
    y = wp.mod(a + _PI, _TWO_PI)
    if y < 0.0:
        y = y + _TWO_PI
    return y - _PI


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
def car_frame(p: wp.vec2f, heading: wp.float32, point: wp.vec2f) -> wp.vec2f:
    """``point`` in the car's frame: ``x`` ahead, ``y`` to the left."""
    gap = point - p
    c = wp.cos(heading)
    sn = wp.sin(heading)
    return wp.vec2f(c * gap[0] + sn * gap[1], -sn * gap[0] + c * gap[1])


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
