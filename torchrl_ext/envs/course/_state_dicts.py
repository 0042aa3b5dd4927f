"""The values a loaded CourseEnv state may hold: the ranges its kernels index and count within.

The base checks the step counters, the seed and that every float is finite; these checks add
the car's counters, the course epochs and every course's parameters, so that a loaded state
never makes a kernel read outside an array nor a counter overflow.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from torchrl_ext.envs._base.state_dicts import require
from torchrl_ext.envs.course._kernels import car as _car
from torchrl_ext.envs.course._kernels.courses import Params
from torchrl_ext.envs.course.config import MAX_HARMONICS

#: The largest epoch from which the next course's epoch cannot overflow int64.
LAST_EPOCH = 2**63 - 2
#: The largest float magnitude loaded: the squared distances of float32 geometry stay finite.
LARGEST = 1e15


def _within(name: str, values: torch.Tensor, low: int | float, high: int | float) -> None:
    require(name, values, (values >= low) & (values <= high), f"values lie in [{low}, {high}]")


def check_car(counts: torch.Tensor, laps: int, segments: int, max_checkpoints: int) -> None:
    """The car's counters: passes within an episode of ``laps`` laps, flags, nearest segment.

    ``segments`` is the number of centerline segments the nearest-segment index ranges over.
    """
    passed = (laps + 1) * max_checkpoints  # an episode ends once every lap's checkpoints pass
    columns = {
        _car.PASSED: ("checkpoints passed", passed),
        _car.STEP_PASSES: ("checkpoints passed in a step", passed),
        _car.OUT: ("the out-of-bounds flag", 1),
        _car.SEGMENT: ("a segment index", segments - 1),
        _car.ENDED: ("how an episode ended", 2),
    }
    for column, (what, high) in columns.items():
        values = counts[:, column]
        require("counts", values, (values >= 0) & (values <= high), f"{what} in [0, {high}]")


def check_magnitudes(state: Mapping[str, torch.Tensor]) -> None:
    """Every float at most :data:`LARGEST` in magnitude (the base checks they are finite)."""
    for name, values in state.items():
        if values.is_floating_point():
            require(name, values, values.abs() <= LARGEST, f"magnitudes are at most {LARGEST:g}")


def check_courses(state: Mapping[str, torch.Tensor], max_checkpoints: int) -> None:
    """Epochs that can advance, flags, checkpoint counts and every course parameter."""
    _within("course.epoch", state["course.epoch"], 0, LAST_EPOCH)
    _within("course.generation", state["course.generation"], 0, LAST_EPOCH + 1)
    _within("course.valid", state["course.valid"], 0, 1)
    _within("course.defects", state["course.defects"], 0, 2**31 - 1)
    _within("course.checkpoint_count", state["course.checkpoint_count"], 0, max_checkpoints)
    for name in Params.vars:
        for key in (f"course.{name}", f"course.param_{name}"):
            _check_param(key, name, state[key])


def _check_param(key: str, name: str, values: torch.Tensor) -> None:
    if name == "harmonics":
        _within(key, values, 1, MAX_HARMONICS)
    elif name == "roughness":
        require(key, values, values >= 0, "a roughness is >= 0")
    else:
        require(key, values, values > 0, f"a {name} is > 0")
