"""torchrl_ext: sequence replay, Warp-backed batched envs and recurrent GAE for TorchRL.

``torchrl_ext.data`` (sample units, minibatches) is imported eagerly; ``torchrl_ext.envs``
(NVIDIA Warp), ``torchrl_ext.objectives`` and ``torchrl_ext.configs`` load on first access.
"""

import importlib
from typing import Any

from torchrl_ext.data import SampleUnit, Sequence, Transition

__all__ = ["SampleUnit", "Sequence", "Transition", "configs", "data", "envs", "objectives"]
__version__ = "0.1.0"

_SUBPACKAGES = ("configs", "envs", "objectives")


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"torchrl_ext.{name}")
    raise AttributeError(f"module 'torchrl_ext' has no attribute {name!r}")
