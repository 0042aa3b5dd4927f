"""Argument checks shared by the three components.

One vocabulary everywhere: a value of the wrong *type* raises :class:`TypeError`, a value of the
right type but outside what is accepted raises :class:`ValueError`. Every message names the
argument and repeats the value received, so that the caller can fix the call without reading
our code. Each check returns the value normalised (a Python ``int`` for any integral input,
numpy integers and 0-d integer tensors included), so callers store what the check returns.

The module imports neither torch nor numpy, so that torch-free callers stay light (the command
line checks a run's config before it imports a pipeline). A value can only be a tensor or a
numpy scalar once its library is imported, so the checks look for those types only in a
library already loaded.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from tensordict.utils import NestedKey

__all__ = [
    "check_bool",
    "check_choice",
    "check_float",
    "check_float_dtype",
    "check_int",
    "check_key",
    "check_optional_int",
    "check_tensor",
]


def _describe(name: str, value: Any) -> str:
    return f"{name}={value!r}"


def _is_bool(value: Any) -> bool:
    """Whether ``value`` is a Python or a numpy bool (numpy's only if numpy was imported)."""
    numpy = sys.modules.get("numpy")
    return isinstance(value, bool) or (numpy is not None and isinstance(value, numpy.bool_))


def _is_integral(value: Any) -> bool:
    """Python and numpy integers and 0-d integer tensors; never ``bool``."""
    torch = sys.modules.get("torch")  # no tensor exists before torch is imported
    if torch is not None and isinstance(value, torch.Tensor):
        return (
            value.ndim == 0
            and not value.is_floating_point()
            and not value.is_complex()
            and (value.dtype is not torch.bool)
        )
    if _is_bool(value):
        return False
    return isinstance(value, numbers.Integral)


def check_int(name: str, value: Any, minimum: int | None = None, maximum: int | None = None) -> int:
    """Returns ``value`` as a Python int within ``[minimum, maximum]``.

    Args:
        name (str): the argument's name, for the message.
        value: what the caller passed.
        minimum (int, optional): smallest accepted value. Defaults to no bound.
        maximum (int, optional): largest accepted value. Defaults to no bound.

    Raises:
        TypeError: if ``value`` is not an integer (``bool`` and floats are refused).
        ValueError: if it lies outside the bounds.

    Examples:
        >>> import numpy as np
        >>> check_int("length", np.int64(4), minimum=1)
        4
        >>> check_int("length", 0, minimum=1)
        Traceback (most recent call last):
        ...
        ValueError: length must be >= 1, got length=0.
    """
    if not _is_integral(value):
        raise TypeError(f"{name} must be an int, got {_describe(name, value)}.")
    number = int(value)
    if minimum is not None and number < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {_describe(name, value)}.")
    if maximum is not None and number > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {_describe(name, value)}.")
    return number


def check_optional_int(
    name: str, value: Any, minimum: int | None = None, maximum: int | None = None
) -> int | None:
    """:func:`check_int`, with ``None`` passed through."""
    return None if value is None else check_int(name, value, minimum, maximum)


def check_float(
    name: str,
    value: Any,
    minimum: float | None = None,
    maximum: float | None = None,
    *,
    open_minimum: bool = False,
) -> float:
    """Returns ``value`` as a finite Python float within the bounds.

    Ints, numpy scalars and 0-d real tensors are accepted; ``bool`` is not.

    Args:
        name (str): the argument's name, for the message.
        value: what the caller passed.
        minimum (float, optional): smallest accepted value. Defaults to no bound.
        maximum (float, optional): largest accepted value. Defaults to no bound.
        open_minimum (bool, optional): refuse ``minimum`` itself. Defaults to ``False``.

    Raises:
        TypeError: if ``value`` is not a real number (a tensor with more than one element
            included).
        ValueError: if it is NaN, infinite or outside the bounds.

    Examples:
        >>> check_float("gamma", 0.5, 0.0, 1.0)
        0.5
        >>> check_float("gamma", float("nan"), 0.0, 1.0)
        Traceback (most recent call last):
        ...
        ValueError: gamma must be a finite number, got gamma=nan.
    """
    torch = sys.modules.get("torch")  # no tensor exists before torch is imported
    if torch is not None and isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.is_complex() or value.dtype is torch.bool:
            raise TypeError(f"{name} must be a real number, got {_describe(name, value)}.")
        number = float(value.item())
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {_describe(name, value)}.")
    else:
        number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {_describe(name, value)}.")
    if minimum is not None and (number < minimum or (open_minimum and number == minimum)):
        relation = ">" if open_minimum else ">="
        raise ValueError(f"{name} must be {relation} {minimum}, got {_describe(name, value)}.")
    if maximum is not None and number > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {_describe(name, value)}.")
    return number


def check_bool(name: str, value: Any) -> bool:
    """Returns ``value`` if it is a bool (numpy's included); raises :class:`TypeError` if not.

    Examples:
        >>> import numpy as np
        >>> check_bool("shuffle", np.True_)
        True
    """
    if _is_bool(value):
        return bool(value)
    raise TypeError(f"{name} must be a bool, got {_describe(name, value)}.")


def check_float_dtype(name: str, dtype: Any) -> torch.dtype:
    """Returns ``dtype`` if it is ``torch.float32`` or ``torch.float64``.

    Raises :class:`TypeError` for anything but a ``torch.dtype``, :class:`ValueError` for
    another dtype.

    Examples:
        >>> import torch
        >>> check_float_dtype("dtype", torch.float64)
        torch.float64
    """
    import torch  # a dtype can only be passed once torch is imported

    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name} must be a torch.dtype, got {_describe(name, dtype)}.")
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(
            f"{name} must be torch.float32 or torch.float64, got {_describe(name, dtype)}."
        )
    return dtype


def check_choice(name: str, value: Any, choices: Iterable[str]) -> str:
    """Returns ``value`` if it is one of ``choices``.

    Raises:
        TypeError: if ``value`` is not a str.
        ValueError: if it is not one of ``choices``.

    Examples:
        >>> check_choice("layout", "flat", ("flat", "batch_time"))
        'flat'
    """
    choices = tuple(choices)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {list(choices)}, got {_describe(name, value)}.")
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {_describe(name, value)}.")
    return value


def check_key(name: str, key: Any, optional: bool = False) -> NestedKey | None:
    """Returns a TensorDict key as a ``str`` or a tuple of ``str`` (``None`` if optional).

    Lists (and Hydra's ``ListConfig``) of str parts are accepted and returned as tuples.

    Raises:
        TypeError: if ``key`` is not a str or a sequence.
        ValueError: if it is empty or holds a part that is not a str.

    Examples:
        >>> check_key("done_key", ["next", "done"])
        ('next', 'done')
    """
    if key is None and optional:
        return None
    if isinstance(key, str):
        if not key:
            raise ValueError(f"{name} must be a non-empty key, got {_describe(name, key)}.")
        return key
    if not isinstance(key, (tuple, list)) and type(key).__name__ != "ListConfig":
        raise TypeError(f"{name} must be a str or a tuple of str, got {_describe(name, key)}.")
    if len(key) and all(isinstance(part, str) and part for part in key):
        return tuple(key)
    raise ValueError(
        f"{name} must be a non-empty key of non-empty str parts, got {_describe(name, key)}."
    )


def check_tensor(
    name: str,
    value: Any,
    dtype: torch.dtype,
    shapes: Iterable[tuple[int, ...]],
    device: torch.device,
) -> torch.Tensor:
    """Returns ``value`` if it is a tensor of ``dtype``, one of ``shapes``, on ``device``.

    Args:
        name (str): the argument's name, for the message.
        value: what the caller passed.
        dtype (torch.dtype): the dtype it must have.
        shapes (iterable of tuple of int): the shapes it may have.
        device (torch.device): the device it must be on.

    Raises:
        TypeError: if ``value`` is not a tensor or has another dtype.
        ValueError: if it has another shape or lies on another device.

    Examples:
        >>> import torch
        >>> x = torch.zeros(3, dtype=torch.int64)
        >>> check_tensor("action", x, torch.int64, [(3,)], torch.device("cpu")).shape
        torch.Size([3])
        >>> check_tensor("action", x, torch.int64, [(3, 1), (4,)], torch.device("cpu"))
        Traceback (most recent call last):
        ...
        ValueError: action must have shape (3, 1) or (4,), got action.shape=(3,).
    """
    import torch

    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {_describe(name, value)}.")
    if value.dtype != dtype:
        raise TypeError(f"{name} must have dtype {dtype}, got {name}.dtype={value.dtype}.")
    shapes = [tuple(shape) for shape in shapes]
    if tuple(value.shape) not in shapes:
        wanted = " or ".join(str(shape) for shape in shapes)
        raise ValueError(f"{name} must have shape {wanted}, got {name}.shape={tuple(value.shape)}.")
    if value.device != device:
        raise ValueError(f"{name} must be on {device}, got {name}.device={value.device}.")
    return value
