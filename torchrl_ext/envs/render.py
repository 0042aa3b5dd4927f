"""Pictures of the envs: :func:`render_frame` and the :class:`RenderPixels` transform.

Both read an env only through its public face, :meth:`~torchrl_ext.envs.WarpEnv.state_dict`,
and draw with plain torch on the env's device (no display, no extra dependency):

* :class:`~torchrl_ext.envs.CartPoleEnv`: side view of the track ``[-2.4, 2.4]`` (the
  termination bounds, the middle of the picture at ``x = 0``), the cart and the pole at its
  angle.
* :class:`~torchrl_ext.envs.CourseEnv`: top-down view of the env's course (grass, the track of
  its width around the centerline, the checkpoints) and the car at its pose, pointing along its
  heading; the view fits the course.

:class:`RenderPixels` adds a ``"pixels"`` entry (uint8 ``[*batch, H, W, 3]``) after every reset
and step, so torchrl's :class:`~torchrl.record.VideoRecorder` records the envs like any pixel env.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from torchrl.data import Bounded
from torchrl.envs import Transform

from torchrl_ext._checks import check_int, check_key

__all__ = ["RenderPixels", "render_frame", "render_frames"]

#: Colours (RGB).
RAIL = (150, 150, 150)
CART = (40, 40, 40)
POLE = (204, 122, 51)
GRASS = (58, 120, 58)
TRACK = (120, 120, 120)
CHECKPOINT = (240, 200, 40)
CAR = (220, 40, 40)

#: CartPole's geometry in metres: the view spans ``[-VIEW_HALF_WIDTH, VIEW_HALF_WIDTH]``.
VIEW_HALF_WIDTH = 3.0
CART_SIZE = (0.5, 0.3)
POLE_LENGTH = 1.0
POLE_WIDTH = 0.08
#: The rail's height, as a fraction of the picture height from the top.
RAIL_ROW = 0.75
#: Car and checkpoint sizes on the course, in pixels.
CAR_PIXELS = (9.0, 5.0)
CHECKPOINT_RADIUS = 2.0


def render_frames(env: Any, size: int = 160) -> torch.Tensor:
    """Pictures of every env of ``env`` as uint8 ``[num_envs, size, size, 3]``.

    Args:
        env (CartPoleEnv or CourseEnv): the env, or a ``TransformedEnv`` around one.
        size (int, optional): height and width in pixels, ``>= 16``. Defaults to 160.

    Examples:
        >>> from torchrl_ext.envs import CartPoleEnv
        >>> env = CartPoleEnv(3, seed=0)
        >>> _ = env.reset()
        >>> frames = render_frames(env, size=32)
        >>> frames.shape, frames.dtype
        (torch.Size([3, 32, 32, 3]), torch.uint8)
    """
    size = check_int("size", size, minimum=16)
    base = getattr(env, "base_env", env)
    state = base.state_dict()
    if "state" in state and state["state"].shape[-1] == 4:
        return _cartpole(state["state"], size)
    if "pose" in state and "course.centerline" in state:
        return _course(state, size)
    raise TypeError(
        f"env must be a CartPoleEnv or a CourseEnv (or a TransformedEnv around one), got env of "
        f"type {type(base).__name__}."
    )


def render_frame(env: Any, index: int = 0, size: int = 160) -> torch.Tensor:
    """The picture of env ``index`` as uint8 ``[size, size, 3]`` (see :func:`render_frames`).

    Args:
        env (CartPoleEnv or CourseEnv): the env, or a ``TransformedEnv`` around one.
        index (int, optional): which env of the batch. Defaults to 0.
        size (int, optional): height and width in pixels, ``>= 16``. Defaults to 160.

    Examples:
        >>> from torchrl_ext.envs import CourseEnv
        >>> env = CourseEnv(2, seed=0)
        >>> _ = env.reset()
        >>> frame = render_frame(env, index=1, size=48)
        >>> frame.shape, frame.dtype
        (torch.Size([48, 48, 3]), torch.uint8)
    """
    num_envs = getattr(env, "num_envs", None) or getattr(env.base_env, "num_envs", 1)
    index = check_int("index", index, minimum=0, maximum=num_envs - 1)
    return render_frames(env, size)[index]


# ---------------------------------------------------------------------------- drawing
def _pixel_centres(size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Column and row coordinates of the pixel centres, ``[size, size]`` each."""
    centres = torch.arange(size, dtype=torch.float32, device=device) + 0.5
    rows, cols = torch.meshgrid(centres, centres, indexing="ij")
    return cols, rows


def _paint(image: torch.Tensor, mask: torch.Tensor, colour: tuple[int, int, int]) -> None:
    """Sets the pixels of ``mask`` (``[N, H, W]``) to ``colour`` in ``image`` (``[N, H, W, 3]``)."""
    image[mask] = torch.tensor(colour, dtype=torch.uint8, device=image.device)


def _segment_distance(px, py, ax, ay, bx, by) -> torch.Tensor:
    """Distance of points ``(px, py)`` to the segments ``a``-``b`` (broadcast)."""
    dx, dy = bx - ax, by - ay
    length2 = (dx * dx + dy * dy).clamp(min=1e-12)
    t = (((px - ax) * dx + (py - ay) * dy) / length2).clamp(0.0, 1.0)
    return torch.hypot(px - (ax + t * dx), py - (ay + t * dy))


def _cartpole(state: torch.Tensor, size: int) -> torch.Tensor:
    """Side view: rail, cart centred on its position, pole from the cart's top at its angle."""
    n, device = state.shape[0], state.device
    state = state.float()
    cols, rows = _pixel_centres(size, device)
    scale = size / (2 * VIEW_HALF_WIDTH)  # pixels per metre
    cx = (size / 2 + state[:, 0] * scale).view(n, 1, 1)
    rail = size * RAIL_ROW
    image = torch.full((n, size, size, 3), 255, dtype=torch.uint8, device=device)
    _paint(image, (rows - rail).abs().lt(1.0).expand(n, -1, -1), RAIL)
    half_w, half_h = CART_SIZE[0] * scale / 2, CART_SIZE[1] * scale / 2
    cart = ((cols - cx).abs() < half_w) & ((rows - rail).abs() < half_h)
    _paint(image, cart, CART)
    theta = state[:, 2].view(n, 1, 1)
    top = rail - half_h
    tip_x = cx + POLE_LENGTH * scale * torch.sin(theta)
    tip_y = top - POLE_LENGTH * scale * torch.cos(theta)
    pole = _segment_distance(cols, rows, cx, torch.full_like(cx, top), tip_x, tip_y)
    _paint(image, pole < POLE_WIDTH * scale / 2, POLE)
    return image


def _course(state: dict[str, torch.Tensor], size: int) -> torch.Tensor:
    """Top-down view fitted to each course: grass, track, checkpoints, car."""
    centreline = state["course.centerline"].float()  # [N, P, 2], closed
    n, device = centreline.shape[0], centreline.device
    width = state["course.width"].float().view(n, 1, 1)
    lo = centreline.amin(1) - width.view(n, 1)  # [N, 2]
    hi = centreline.amax(1) + width.view(n, 1)
    span = (hi - lo).amax(-1).clamp(min=1e-6).view(n, 1, 1)
    centre = ((lo + hi) / 2).view(n, 1, 1, 2)
    cols, rows = _pixel_centres(size, device)
    # world coordinates of every pixel centre (y up), [N, H, W]
    wx = centre[..., 0] + (cols - size / 2) * span / size
    wy = centre[..., 1] - (rows - size / 2) * span / size
    image = torch.empty((n, size, size, 3), dtype=torch.uint8, device=device)
    _paint(image, torch.ones(n, size, size, dtype=torch.bool, device=device), GRASS)
    a = centreline.view(n, 1, 1, -1, 2)
    b = torch.roll(centreline, -1, dims=1).view(n, 1, 1, -1, 2)
    dist = _segment_distance(
        wx.unsqueeze(-1), wy.unsqueeze(-1), a[..., 0], a[..., 1], b[..., 0], b[..., 1]
    ).amin(-1)
    _paint(image, dist < width / 2, TRACK)
    pixel = span / size  # metres per pixel, [N, 1, 1]
    points = state["course.checkpoints"].float()  # [N, C, 2]
    used = torch.arange(points.shape[1], device=device) < state["course.checkpoint_count"].view(
        n, 1
    )
    cx, cy = points[..., 0].view(n, 1, 1, -1), points[..., 1].view(n, 1, 1, -1)
    near = (
        torch.hypot(wx.unsqueeze(-1) - cx, wy.unsqueeze(-1) - cy)
        < CHECKPOINT_RADIUS * pixel[..., None]
    )
    _paint(image, (near & used.view(n, 1, 1, -1)).any(-1), CHECKPOINT)
    pose = state["pose"].float()
    heading = pose[:, 2].view(n, 1, 1)
    dx, dy = wx - pose[:, 0].view(n, 1, 1), wy - pose[:, 1].view(n, 1, 1)
    along = dx * torch.cos(heading) + dy * torch.sin(heading)
    across = -dx * torch.sin(heading) + dy * torch.cos(heading)
    length, breadth = CAR_PIXELS[0] * pixel / 2, CAR_PIXELS[1] * pixel / 2
    # a wedge: full breadth at the back, narrowing towards the nose
    taper = breadth * (0.5 - along / (2 * length)).clamp(0.0, 1.0) * 2
    car = (along.abs() < length) & (across.abs() < taper.clamp(max=breadth))
    _paint(image, car, CAR)
    return image


# ---------------------------------------------------------------------------- transform
class RenderPixels(Transform):
    """Adds the envs' pictures under ``"pixels"`` after every reset and step.

    With it, torchrl's :class:`~torchrl.record.VideoRecorder` (placed after it) records a
    :class:`~torchrl_ext.envs.CartPoleEnv` or :class:`~torchrl_ext.envs.CourseEnv` like any
    pixel-based env. Rendering costs a full picture per env and step: use it on evaluation envs
    of a few envs, not on the training envs.

    Args:
        size (int, optional): height and width in pixels, ``>= 16``. Defaults to 160.
        out_key (str, optional): where the pictures go. Defaults to ``"pixels"``.

    Examples:
        >>> from torchrl.envs import TransformedEnv
        >>> from torchrl_ext.envs import CartPoleEnv
        >>> env = TransformedEnv(CartPoleEnv(2, seed=0), RenderPixels(size=32))
        >>> td = env.rollout(3)
        >>> td["pixels"].shape, td["pixels"].dtype
        (torch.Size([2, 3, 32, 32, 3]), torch.uint8)
    """

    def __init__(self, size: int = 160, out_key: str = "pixels") -> None:
        self.size = check_int("size", size, minimum=16)
        out_key = check_key("out_key", out_key)
        super().__init__(in_keys=[], out_keys=[out_key])

    def _render(self, tensordict: TensorDictBase) -> TensorDictBase:
        frames = render_frames(self.parent, self.size)
        return tensordict.set(
            self.out_keys[0], frames.reshape(*tensordict.batch_size, *frames.shape[1:])
        )

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return self._render(next_tensordict)

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return self._render(tensordict_reset)

    def transform_observation_spec(self, observation_spec):
        """Declares ``"pixels"``: uint8 ``[*batch, size, size, 3]`` in ``[0, 255]``."""
        shape = (*observation_spec.shape, self.size, self.size, 3)
        observation_spec[self.out_keys[0]] = Bounded(
            0, 255, shape=shape, dtype=torch.uint8, device=observation_spec.device
        )
        return observation_spec
