"""The parameters of a course and the constants of the car, written once.

:class:`CourseParams` and :class:`CarConfig` are frozen dataclasses whose fields are also the
fields of the Warp structs the kernels take: ``Params`` of the generator's kernels (one ``[N]``
array per course parameter, int32 for an ``int`` field, else float32) and ``CarParams`` of the
env's kernels (one value per car constant). The kernel modules build those structs from these
fields, so a field is written in one place and reaches the kernels by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import torch

from torchrl_ext._checks import check_float

__all__ = ["CarConfig", "CourseParams"]

MAX_HARMONICS = 8
"""Highest Fourier harmonic of the radius; every course draws ``2 * MAX_HARMONICS`` numbers."""


def _or_default(name: str, value: Any, config_type: type) -> Any:
    """``config_type()`` for ``None``, else ``value`` if it is a ``config_type``."""
    if value is None:
        return config_type()
    if not isinstance(value, config_type):
        raise TypeError(f"{name} must be a {config_type.__name__}, got {name}={value!r}.")
    return value


def _check_fields(config: Any, check: Callable[[str, Any], Any]) -> None:
    """Check every field of the frozen dataclass ``config``; keep what ``check`` returns for it."""
    for f in fields(config):
        object.__setattr__(config, f.name, check(f.name, getattr(config, f.name)))


@dataclass(frozen=True)
class CourseParams:
    """Generator parameters of one course (a curriculum changes them per env between episodes).

    The centerline point at angle ``t`` has radius ``scale * (1 + roughness * sum_k a_k cos(k t +
    phi_k))`` over harmonics ``k = 1..harmonics``, with random ``a_k`` in ``[-1/k, 1/k]``.

    Args:
        scale (float, optional): mean radius of the course. Defaults to 10.0.
        roughness (float, optional): relative amplitude of the radius wave; below
            ``1 / sum_k 1/k`` (0.438 at 5 harmonics) no course crosses itself. Defaults to 0.3.
        harmonics (int, optional): highest harmonic, 1 to 8; more harmonics, sharper turns.
            Defaults to 5.
        width (float, optional): track width. Defaults to 2.0.
        checkpoint_spacing (float, optional): arc length between checkpoints (and gates).
            Defaults to 5.0.
        gate_width (float, optional): length of each gate's bar, from post to post (gates
            mode). Defaults to 4.0.

    Examples:
        >>> from torchrl_ext.envs.course import CourseParams
        >>> params = CourseParams(width=3.0)
        >>> print(params.width, params.harmonics)
        3.0 5
    """

    scale: float = 10.0
    roughness: float = 0.3
    harmonics: int = 5
    width: float = 2.0
    checkpoint_spacing: float = 5.0
    gate_width: float = 4.0

    def __post_init__(self) -> None:
        _check_fields(self, _check_param)


def _check_param(name: str, value: Any) -> Any:
    """Return ``value`` if it is a valid :class:`CourseParams` value, or a tensor of them."""
    values = torch.as_tensor(value)
    if name == "harmonics":
        if values.is_floating_point() or values.dtype == torch.bool:
            raise TypeError(f"harmonics must be an integer, got harmonics={value!r}.")
        if not bool(torch.all((values >= 1) & (values <= MAX_HARMONICS))):
            raise ValueError(f"harmonics must be in [1, {MAX_HARMONICS}], got harmonics={value!r}.")
        return value
    values = values.to(torch.float64)
    positive = name != "roughness"
    ok = torch.isfinite(values) & ((values > 0) if positive else (values >= 0))
    if not bool(torch.all(ok)):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{name} must be finite and {bound}, got {name}={value!r}.")
    return value


@dataclass(frozen=True)
class CarConfig:
    """Constants of the kinematic car and of the reward.

    Args:
        dt (float, optional): time step in seconds. Defaults to 0.1.
        accel (float, optional): acceleration at full throttle. Defaults to 4.0.
        drag (float, optional): linear drag coefficient. Defaults to 0.5.
        max_speed (float, optional): speed limit. Defaults to 5.0.
        max_steer (float, optional): steering angle at ``steer = 1``, radians. Defaults to 0.5.
        wheelbase (float, optional): distance between the axles. Defaults to 1.0.
        max_range (float, optional): range readings are clipped to this. Defaults to 5.0.
        ray_spread (float, optional): the rays cover ``[-ray_spread, ray_spread]`` around the
            heading, radians. Defaults to 1.2.
        progress_coef (float, optional): reward per unit of arc length driven. Defaults to 0.1.
        crash_penalty (float, optional): reward subtracted on leaving the track. Defaults to 1.0.

    Raises:
        TypeError: for a value that is not a real number, naming it.
        ValueError: for a value that is not finite, negative, or zero where it must be > 0.

    Examples:
        >>> from torchrl_ext.envs import CarConfig
        >>> config = CarConfig(max_speed=3.0)
        >>> print(config.max_speed, config.dt)
        3.0 0.1
    """

    dt: float = 0.1
    accel: float = 4.0
    drag: float = 0.5
    max_speed: float = 5.0
    max_steer: float = 0.5
    wheelbase: float = 1.0
    max_range: float = 5.0
    ray_spread: float = 1.2
    progress_coef: float = 0.1
    crash_penalty: float = 1.0

    def __post_init__(self) -> None:
        _check_fields(self, _check_car_constant)  # stores plain floats, whatever real was passed


_MAY_BE_ZERO = frozenset({"drag", "ray_spread", "progress_coef", "crash_penalty"})


def _check_car_constant(name: str, value: Any) -> float:
    """A :class:`CarConfig` value as a finite float, ``>= 0`` (``> 0`` unless it may be zero)."""
    return check_float(name, value, 0.0, open_minimum=name not in _MAY_BE_ZERO)
