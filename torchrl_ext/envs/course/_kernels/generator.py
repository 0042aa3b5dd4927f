"""Warp kernels of the course generator: the masked rebuild, and the mask's any-flag.

A masked regeneration is one :func:`rebuild` launch: one thread per env returns at once where the
mask is 0, so the other envs' arrays stay bitwise untouched and the launch can be recorded into a
graph whatever the mask holds at replay time. Each stage of a rebuild is a ``wp.func``: the epoch
and parameters (:func:`commit_params`, here), the draws (``draws``), the centerline, arc length,
checkpoints and gates (``centerline``) and the validity (``validity``); the arrays arrive as one
:class:`~torchrl_ext.envs.course._kernels.courses.Courses`. :func:`clear_flag` and
:func:`any_masked` reduce a mask to the flag that lets a regeneration skip an all-zero mask.
"""

from __future__ import annotations

import warp as wp

from torchrl_ext.envs.course._kernels.centerline import (
    build_centerline,
    measure_arc_length,
    needed_checkpoints,
    place_gates,
)
from torchrl_ext.envs.course._kernels.courses import Courses, Params
from torchrl_ext.envs.course._kernels.draws import draw_coefficients
from torchrl_ext.envs.course._kernels.validity import check_validity

EPOCH_KEEP = wp.constant(0)
EPOCH_ADVANCE = wp.constant(1)
EPOCH_RESTART = wp.constant(2)


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
