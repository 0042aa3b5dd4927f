"""Hydra configs for torchrl_ext, registered in TorchRL's config groups when hydra-core is there.

Importing this module registers :class:`TransitionConfig` and :class:`SequenceConfig` in the
``sample_unit`` group (as ``torchrl_ext_transition`` and ``torchrl_ext_sequence``) when hydra-core
is installed; :func:`register_configs` does it explicitly (and raises without hydra-core).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

try:  # hydra-core is an optional extra: pip install torchrl_ext[hydra]
    from hydra.core.config_store import ConfigStore
    from omegaconf import MISSING
    from torchrl.trainers.algorithms.configs.data import SampleUnitConfig

    _HYDRA_IMPORT_ERROR: ImportError | None = None
except ImportError as err:  # pragma: no cover - exercised only without the extra
    ConfigStore = None
    MISSING = "???"
    _HYDRA_IMPORT_ERROR = err

    @dataclass
    class SampleUnitConfig:
        """Stand-in base when hydra-core is not installed."""

        _target_: str = ""

        def __post_init__(self) -> None:
            """Nothing to check."""


__all__ = ["SequenceConfig", "TransitionConfig", "register_configs"]

GROUP = "sample_unit"


@dataclass
class TransitionConfig(SampleUnitConfig):
    """Hydra config of :class:`torchrl_ext.data.Transition` (it takes no arguments).

    Examples:
        >>> from hydra.utils import instantiate
        >>> from torchrl_ext.configs import TransitionConfig
        >>> instantiate(TransitionConfig())
        Transition()
    """

    _target_: str = "torchrl_ext.data.Transition"


@dataclass
class SequenceConfig(SampleUnitConfig):
    """Hydra config of :class:`torchrl_ext.data.Sequence`: one field per constructor argument.

    Examples:
        >>> from hydra.utils import instantiate
        >>> from torchrl_ext.configs import SequenceConfig
        >>> unit = instantiate(SequenceConfig(length=8, burn_in=4, layout="batch_time"))
        >>> unit.window, unit.done_key
        (12, ('next', 'done'))
    """

    _target_: str = "torchrl_ext.data.Sequence"
    length: int = MISSING
    episode_boundary: str = "pad"
    done_key: Any = ("next", "done")
    burn_in: int = 0
    bootstrap: int = 0
    stride: Any = None
    dilation: Any = None
    traj_key: Any = None
    layout: str = "flat"
    priority_reduction: str = "max"
    priority_eta: float = 0.9
    priority_learning_only: bool = False
    is_init_key: Any = "is_init"


def register_configs() -> None:
    """Stores the configs in Hydra's ``ConfigStore`` under TorchRL's ``sample_unit`` group.

    Raises:
        ImportError: if hydra-core is not installed.
    """
    if _HYDRA_IMPORT_ERROR is not None:
        raise ImportError(
            "torchrl_ext.configs.register_configs needs hydra-core: "
            "pip install 'torchrl_ext[hydra]'."
        ) from _HYDRA_IMPORT_ERROR
    store = ConfigStore.instance()
    store.store(group=GROUP, name="torchrl_ext_transition", node=TransitionConfig)
    store.store(group=GROUP, name="torchrl_ext_sequence", node=SequenceConfig)


if _HYDRA_IMPORT_ERROR is None:
    register_configs()
