"""Geometry queries on a generator's gates: a point's frame along them, a point touching a post.

The launches behind ``CourseGenerator.frame`` and ``CourseGenerator.hit_posts``, one thread per
env over the kernels of :mod:`~torchrl_ext.envs.course._kernels.gates`.
"""

from __future__ import annotations

import torch
import warp as wp

from torchrl_ext._checks import check_float, check_tensor
from torchrl_ext.envs.course._kernels.courses import Courses
from torchrl_ext.envs.course._kernels.gates import locate_on_gates, touch_posts


def check_positions(positions: torch.Tensor, num_envs: int, torch_device: torch.device) -> wp.array:
    """Float32 ``[num_envs, 2]`` finite positions on the generator's device, as a vec2f array.

    Raises:
        ValueError: for a NaN or infinite position: no point of the plane is nearest to it.
    """
    shape = (num_envs, 2)
    check_tensor("positions", positions, torch.float32, [shape], torch_device)
    finite = positions.isfinite()
    if not bool(finite.all()):
        bad = positions[~finite][0].item()
        raise ValueError(f"positions must be finite, got a position holding {bad!r}.")
    return wp.from_torch(positions.contiguous(), dtype=wp.vec2f)


def frame(
    courses: Courses,
    positions: torch.Tensor,
    num_envs: int,
    device: wp.context.Device,
    torch_device: torch.device,
) -> torch.Tensor:
    """Per env, ``(progress, lateral)`` of a point on its gates' centerline (see ``frame``)."""
    points = check_positions(positions, num_envs, torch_device)
    out = torch.zeros(num_envs, 2, dtype=torch.float32, device=positions.device)
    wp.launch(
        locate_on_gates,
        dim=num_envs,
        inputs=[courses, points],
        outputs=[wp.from_torch(out, dtype=wp.vec2f)],
        device=device,
    )
    return out


def hit_posts(
    courses: Courses,
    positions: torch.Tensor,
    collision: float,
    num_envs: int,
    device: wp.context.Device,
    torch_device: torch.device,
) -> torch.Tensor:
    """Per env, 1 where a point is closer than ``collision`` to a post (see ``hit_posts``)."""
    radius = check_float("collision", collision, minimum=0.0, open_minimum=True)
    points = check_positions(positions, num_envs, torch_device)
    hit = torch.zeros(num_envs, dtype=torch.int32, device=positions.device)
    wp.launch(
        touch_posts,
        dim=num_envs,
        inputs=[courses, points, radius],
        outputs=[wp.from_torch(hit)],
        device=device,
    )
    return hit
