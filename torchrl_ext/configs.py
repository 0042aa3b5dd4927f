"""Hydra configs for torchrl_ext, registered in TorchRL's config groups when hydra-core is there.

Importing this module registers every config below in TorchRL's groups when hydra-core is
installed; :func:`register_configs` does it explicitly (and raises without hydra-core):

- ``sample_unit``: :class:`TransitionConfig`, :class:`SequenceConfig` and :class:`TapeConfig`
  (``torchrl_ext_transition``, ``torchrl_ext_sequence``, ``torchrl_ext_tape``);
- ``env``: :class:`CartPoleEnvConfig`, :class:`PendulumEnvConfig`, :class:`CourseEnvConfig`,
  :class:`SignallingEnvConfig` and :class:`PopGymEnvConfig` (``torchrl_ext_cartpole``,
  ``torchrl_ext_pendulum``, ``torchrl_ext_course``, ``torchrl_ext_signalling``,
  ``torchrl_ext_popgym``), built by :func:`make_env`;
- ``value``: :class:`RecurrentGAEConfig` (``torchrl_ext_recurrent_gae``);
- ``loss``: :class:`R2D2LossConfig` (``torchrl_ext_r2d2``);
- ``model``: :class:`LSTMModuleConfig` and :class:`GRUModuleConfig` (``torchrl_ext_lstm``,
  ``torchrl_ext_gru``), built by :func:`make_lstm_module` and :func:`make_gru_module`.

Fields mirror the constructors' arguments with the same defaults. A ``torch.dtype`` is written
as its name (``dtype: float64``); nested networks are configs of their own (Hydra instantiates
them first), as in TorchRL's configs.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import torch

try:  # hydra-core is an optional extra: pip install torchrl_ext[hydra]
    from hydra.core.config_store import ConfigStore
    from omegaconf import MISSING
    from torchrl.trainers.algorithms.configs.data import SampleUnitConfig
    from torchrl.trainers.algorithms.configs.envs import EnvConfig
    from torchrl.trainers.algorithms.configs.modules import ModelConfig
    from torchrl.trainers.algorithms.configs.objectives import LossConfig

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

    @dataclass
    class EnvConfig:
        """Stand-in base when hydra-core is not installed."""

        _partial_: bool = False

        def __post_init__(self) -> None:
            """Nothing to check."""

    LossConfig = EnvConfig

    @dataclass
    class ModelConfig(EnvConfig):
        """Stand-in base when hydra-core is not installed."""

        in_keys: Any = None
        out_keys: Any = None
        shared: bool = False


__all__ = [
    "CartPoleEnvConfig",
    "CourseEnvConfig",
    "GRUModuleConfig",
    "LSTMModuleConfig",
    "PendulumEnvConfig",
    "PopGymEnvConfig",
    "R2D2LossConfig",
    "RecurrentGAEConfig",
    "SequenceConfig",
    "SignallingEnvConfig",
    "TapeConfig",
    "TransitionConfig",
    "make_env",
    "make_gru_module",
    "make_lstm_module",
    "register_configs",
]

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


@dataclass
class TapeConfig(SampleUnitConfig):
    """Hydra config of :class:`torchrl_ext.data.Tape`: one field per constructor argument.

    Examples:
        >>> from hydra.utils import instantiate
        >>> from torchrl_ext.configs import TapeConfig
        >>> unit = instantiate(TapeConfig(length=64, rows=4))
        >>> unit.shape, unit.done_key
        (torch.Size([4, 64]), ('next', 'done'))
    """

    _target_: str = "torchrl_ext.data.Tape"
    length: int = MISSING
    rows: Any = None
    done_key: Any = ("next", "done")
    traj_key: Any = None
    priority_reduction: str = "max"
    priority_eta: float = 0.9
    is_init_key: Any = "is_init"


# -- envs ------------------------------------------------------------------------------------

#: Envs :func:`make_env` builds from ``torchrl_ext.envs``; POPGym's come from its ``__all__``.
_ENVS = ("CartPoleEnv", "PendulumEnv", "CourseEnv", "SignallingEnv")


@dataclass
class WarpEnvConfig(EnvConfig):
    """Fields every torchrl_ext env takes; ``env_name`` says which env :func:`make_env` builds."""

    env_name: str = MISSING
    num_envs: int = MISSING
    device: str = "cpu"
    seed: Any = None
    capture: bool = False
    _target_: str = "torchrl_ext.configs.make_env"


@dataclass
class CartPoleEnvConfig(WarpEnvConfig):
    """Hydra config of :class:`torchrl_ext.envs.CartPoleEnv`.

    Examples:
        >>> from hydra.utils import instantiate
        >>> from torchrl_ext.configs import CartPoleEnvConfig
        >>> env = instantiate(CartPoleEnvConfig(num_envs=4, seed=0, observe_velocity=False))
        >>> type(env).__name__, env.batch_size, env.observation_spec["observation"].shape
        ('CartPoleEnv', torch.Size([4]), torch.Size([4, 2]))
    """

    env_name: str = "CartPoleEnv"
    observe_velocity: bool = True
    max_steps: Any = 500
    dtype: str = "float32"


@dataclass
class PendulumEnvConfig(WarpEnvConfig):
    """Hydra config of :class:`torchrl_ext.envs.PendulumEnv`."""

    env_name: str = "PendulumEnv"
    max_steps: Any = 200
    dtype: str = "float32"


@dataclass
class CourseEnvConfig(WarpEnvConfig):
    """Hydra config of :class:`torchrl_ext.envs.CourseEnv`.

    ``params`` and ``car`` take the fields of :class:`~torchrl_ext.envs.CourseParams` and
    :class:`~torchrl_ext.envs.CarConfig` as a mapping (``params: {roughness: 0.5}``); ``None``
    keeps their defaults.
    """

    env_name: str = "CourseEnv"
    params: Any = None
    num_points: int = 64
    max_checkpoints: int = 32
    num_rays: int = 5
    laps: int = 1
    crash: str = "respawn"
    car: Any = None
    max_steps: Any = 1000
    mode: str = "track"
    collision: float = 0.3


@dataclass
class SignallingEnvConfig(WarpEnvConfig):
    """Hydra config of :class:`torchrl_ext.envs.SignallingEnv`."""

    env_name: str = "SignallingEnv"
    vocab: int = 8
    delay: int = 2
    rewards: str = "per_agent"
    dtype: str = "float32"


@dataclass
class PopGymEnvConfig(WarpEnvConfig):
    """Hydra config of any POPGym port of :mod:`torchrl_ext.envs.popgym`.

    The ports share their arguments; ``env_name`` is the class name, e.g.
    ``"RepeatPreviousEnv"``. ``categorical_action_encoding`` ``False`` or ``True`` gives the
    specs TorchRL's ``GymEnv`` gives (see :func:`torchrl_ext.envs.popgym.make`).
    """

    difficulty: str = "easy"
    dtype: str = "float32"
    categorical_action_encoding: Any = None


def make_env(env_name: str, num_envs: int, **kwargs: Any) -> Any:
    """Builds the torchrl_ext env named ``env_name`` (the target of the env configs).

    Args:
        env_name (str): ``"CartPoleEnv"``, ``"PendulumEnv"``, ``"CourseEnv"``,
            ``"SignallingEnv"`` or the class name of a POPGym port (the ``...Env`` names of
            ``torchrl_ext.envs.popgym.__all__``).
        num_envs (int): envs stepped together.
        **kwargs: the env's other constructor arguments; ``dtype`` may be a name
            (``"float64"``), ``params`` and ``car`` (``CourseEnv``) mappings of their fields.

    Raises:
        ValueError: if ``env_name`` names no env, or ``dtype`` no floating dtype.
    """
    env_class = _env_class(env_name)
    if "dtype" in kwargs:
        kwargs["dtype"] = _float_dtype("dtype", kwargs["dtype"])
    if env_name == "CourseEnv":
        from torchrl_ext.envs import CarConfig, CourseParams

        for key, kind in (("params", CourseParams), ("car", CarConfig)):
            if kwargs.get(key) is not None and not isinstance(kwargs[key], kind):
                kwargs[key] = kind(**dict(kwargs[key]))
    return env_class(num_envs, **kwargs)


def _env_class(env_name: str) -> type:
    from torchrl_ext.envs import popgym

    modules = {name: "torchrl_ext.envs" for name in _ENVS}
    ports = [name for name in popgym.__all__ if name.endswith("Env")]  # the classes
    modules.update({name: "torchrl_ext.envs.popgym" for name in ports})
    if env_name not in modules:
        raise ValueError(
            f"env_name must name a torchrl_ext env, got env_name={env_name!r}; choose one of "
            f"{sorted(modules)}."
        )
    return getattr(importlib.import_module(modules[env_name]), env_name)


def _float_dtype(name: str, value: Any) -> torch.dtype:
    """A floating ``torch.dtype`` from itself or its name (``"float32"``, ``"torch.float64"``)."""
    dtype = value
    if isinstance(value, str):
        dtype = getattr(torch, value.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(
            f"{name} must be a floating torch dtype or its name (e.g. 'float32'), got "
            f"{name}={value!r}."
        )
    return dtype


# -- objectives ------------------------------------------------------------------------------


@dataclass
class RecurrentGAEConfig(LossConfig):
    """Hydra config of :class:`torchrl_ext.objectives.RecurrentGAE`.

    ``value_network`` is a config of the critic (or ``None`` for a rollout that already holds
    the state values).

    Examples:
        >>> from hydra.utils import instantiate
        >>> from torchrl_ext.configs import RecurrentGAEConfig
        >>> gae = instantiate(RecurrentGAEConfig(gamma=0.99, lmbda=0.95))
        >>> type(gae).__name__, float(gae.gamma)
        ('RecurrentGAE', 0.99)
    """

    gamma: float = MISSING
    lmbda: float = MISSING
    value_network: Any = None
    initial_state: str = "zeros"
    chunk_len: Any = None
    time_dim: Any = None
    _target_: str = "torchrl_ext.objectives.RecurrentGAE"


@dataclass
class R2D2LossConfig(LossConfig):
    """Hydra config of :class:`torchrl_ext.objectives.R2D2Loss`.

    ``value_network`` is a config of the recurrent Q-network.
    """

    value_network: Any = MISSING
    burn_in: int = 0
    n_step: int = MISSING
    gamma: float = 0.997
    value_rescaling: bool = True
    rescale_eps: float = 1e-3
    sample_unit: str = "sequence"
    _target_: str = "torchrl_ext.objectives.R2D2Loss"


# -- modules ---------------------------------------------------------------------------------


@dataclass
class _RecurrentModuleConfig(ModelConfig):
    """Fields :class:`LSTMModuleConfig` and :class:`GRUModuleConfig` share."""

    input_size: Any = None
    hidden_size: Any = None
    num_layers: int = 1
    bias: bool = True
    batch_first: bool = True
    dropout: float = 0.0
    bidirectional: bool = False
    python_based: bool = False
    recurrent_backend: str = "pad"
    recurrent_compute_dtype: str = "float32"
    recurrent_recompute: str = "none"
    recurrent_matmul_precision: str = "auto"
    in_key: Any = None
    out_key: Any = None
    device: Any = None
    default_recurrent_mode: Any = None


@dataclass
class LSTMModuleConfig(_RecurrentModuleConfig):
    """Hydra config of :class:`torchrl_ext.modules.LSTMModule`.

    Examples:
        >>> from hydra.utils import instantiate
        >>> from torchrl_ext.configs import LSTMModuleConfig
        >>> cfg = LSTMModuleConfig(input_size=3, hidden_size=8, in_key="obs", out_key="h")
        >>> module = instantiate(cfg)
        >>> type(module).__name__, module.lstm.hidden_size, module.in_keys[0]
        ('LSTMModule', 8, 'obs')
    """

    proj_size: int = 0
    lstm: Any = None
    _target_: str = "torchrl_ext.configs.make_lstm_module"


@dataclass
class GRUModuleConfig(_RecurrentModuleConfig):
    """Hydra config of :class:`torchrl_ext.modules.GRUModule`."""

    gru: Any = None
    _target_: str = "torchrl_ext.configs.make_gru_module"


def make_lstm_module(**kwargs: Any) -> Any:
    """Builds a :class:`torchrl_ext.modules.LSTMModule` from its config's fields.

    ``recurrent_compute_dtype`` may be a name, keys may be lists (nested keys as lists of
    strings), and ``shared=True`` puts the module's parameters in shared memory, as TorchRL's
    model configs do.
    """
    from torchrl_ext.modules import LSTMModule

    return _recurrent_module(LSTMModule, kwargs)


def make_gru_module(**kwargs: Any) -> Any:
    """Builds a :class:`torchrl_ext.modules.GRUModule` (see :func:`make_lstm_module`)."""
    from torchrl_ext.modules import GRUModule

    return _recurrent_module(GRUModule, kwargs)


def _recurrent_module(module_class: type, kwargs: dict[str, Any]) -> Any:
    shared = kwargs.pop("shared", False)
    if "recurrent_compute_dtype" in kwargs:
        kwargs["recurrent_compute_dtype"] = _float_dtype(
            "recurrent_compute_dtype", kwargs["recurrent_compute_dtype"]
        )
    for name in ("in_key", "out_key", "in_keys", "out_keys"):
        if kwargs.get(name) is not None:
            kwargs[name] = _keys(kwargs[name], many=name.endswith("keys"))
    module = module_class(**kwargs)
    return module.share_memory() if shared else module


def _keys(value: Any, many: bool) -> Any:
    """Hydra's lists as TensorDict keys: a nested key is a tuple of strings."""
    if isinstance(value, str):
        return value
    items = list(value)
    if many:
        return [item if isinstance(item, str) else tuple(item) for item in items]
    return tuple(items)


# -- registration ----------------------------------------------------------------------------

#: ``(group, name, config)`` of every config :func:`register_configs` stores.
REGISTERED = (
    ("sample_unit", "torchrl_ext_transition", TransitionConfig),
    ("sample_unit", "torchrl_ext_sequence", SequenceConfig),
    ("sample_unit", "torchrl_ext_tape", TapeConfig),
    ("env", "torchrl_ext_cartpole", CartPoleEnvConfig),
    ("env", "torchrl_ext_pendulum", PendulumEnvConfig),
    ("env", "torchrl_ext_course", CourseEnvConfig),
    ("env", "torchrl_ext_signalling", SignallingEnvConfig),
    ("env", "torchrl_ext_popgym", PopGymEnvConfig),
    ("value", "torchrl_ext_recurrent_gae", RecurrentGAEConfig),
    ("loss", "torchrl_ext_r2d2", R2D2LossConfig),
    ("model", "torchrl_ext_lstm", LSTMModuleConfig),
    ("model", "torchrl_ext_gru", GRUModuleConfig),
)


def register_configs() -> None:
    """Stores the configs in Hydra's ``ConfigStore`` under TorchRL's groups (see the module).

    Raises:
        ImportError: if hydra-core is not installed.
    """
    if _HYDRA_IMPORT_ERROR is not None:
        raise ImportError(
            "torchrl_ext.configs.register_configs needs hydra-core: "
            "pip install 'torchrl_ext[hydra]'."
        ) from _HYDRA_IMPORT_ERROR
    store = ConfigStore.instance()
    for group, name, node in REGISTERED:
        store.store(group=group, name=name, node=node)


if _HYDRA_IMPORT_ERROR is None:
    register_configs()
