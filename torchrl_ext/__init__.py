"""torchrl_ext: sequence replay, Warp-backed batched envs, recurrent modules and GAE for TorchRL.

Every subpackage loads on first access (``torchrl_ext.Sequence`` imports ``torchrl_ext.data``),
so a command that needs one part, or only prints its ``--help``, does not pay for the others.
"""

import importlib
from typing import Any

__all__ = [
    "SampleUnit",
    "Sequence",
    "Tape",
    "Transition",
    "configs",
    "data",
    "envs",
    "modules",
    "objectives",
]
__version__ = "0.1.0"

_SUBPACKAGES = ("configs", "data", "envs", "modules", "objectives")
_DATA_NAMES = ("SampleUnit", "Sequence", "Tape", "Transition")


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"torchrl_ext.{name}")
    if name in _DATA_NAMES:
        return getattr(importlib.import_module("torchrl_ext.data"), name)
    raise AttributeError(f"module 'torchrl_ext' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's own names and the lazily exported ones (``dir()`` lists all of ``__all__``)."""
    return sorted(set(globals()) | set(__all__))
