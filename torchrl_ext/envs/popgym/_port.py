"""What every POPGym port shares: difficulty presets, constructor, specs and state checks.

A port built with ``categorical_action_encoding`` set presents TorchRL's ``GymEnv`` layout of the
same popgym env (see :mod:`~torchrl_ext.envs.popgym._gymenv_layout`): :class:`PopGymEnv` hands its
outputs and its actions to a :class:`~torchrl_ext.envs.popgym._gymenv_layout.GymEnvLayout` at the
TensorDict boundary; the kernels keep category indices.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal, TypeVar

import torch
from tensordict import TensorDictBase
from torchrl.data import Categorical, Composite, MultiCategorical, TensorSpec, Unbounded

from torchrl_ext._checks import check_bool, check_choice
from torchrl_ext.envs._base import actions
from torchrl_ext.envs._base.state_dicts import require
from torchrl_ext.envs.popgym._gymenv_layout import GymEnvLayout
from torchrl_ext.envs.warp_env import WarpEnv

Difficulty = Literal["easy", "medium", "hard"]
DIFFICULTIES = ("easy", "medium", "hard")

T = TypeVar("T")


def preset(difficulty: Any, presets: Mapping[str, T]) -> T:
    """The preset of ``difficulty`` ("easy", "medium" or "hard"), checked.

    Raises:
        TypeError: if ``difficulty`` is not a str.
        ValueError: if it names no difficulty.

    Examples:
        >>> from torchrl_ext.envs.popgym._port import preset
        >>> preset("medium", {"easy": 1, "medium": 8, "hard": 16})
        8
    """
    return presets[check_choice("difficulty", difficulty, DIFFICULTIES)]


class PopGymEnv(WarpEnv):
    """Base of the POPGym ports: a :class:`~torchrl_ext.envs.WarpEnv` sized by a difficulty.

    A subclass declares :attr:`presets` (``"easy"``, ``"medium"`` and ``"hard"``: POPGym's
    ``Easy``, ``Medium`` and ``Hard`` classes) and :meth:`_configure`, which sets the env's sizes
    from the chosen preset and returns its ``max_steps``, the most steps an episode of that size
    runs; it has no constructor of its own. Every port's episodes end within ``max_steps``.

    Args:
        num_envs (int): number of envs.
        device (torch.device or str, optional): device of state and outputs. Defaults to ``"cpu"``.
        seed (int, optional): 64-bit seed. Defaults to ``None`` (drawn from torch's generator).

    Keyword Args:
        difficulty (str, optional): ``"easy"``, ``"medium"`` or ``"hard"``: the preset (see the
            env's docstring). Defaults to ``"easy"``.
        dtype (torch.dtype, optional): float dtype of state, observations and rewards
            (``torch.float32`` or ``torch.float64``). Defaults to ``torch.float32``.
        capture (bool, optional): replay recorded Warp graphs. Defaults to ``False``.
        categorical_action_encoding (bool, optional): ``None`` keeps the port's own specs
            (category indices, ``MultiCategorical`` boards). ``False`` or ``True`` presents the
            specs, keys and dtypes TorchRL's ``GymEnv`` gives for the same popgym env with that
            ``categorical_action_encoding``: one-hot int64 observations and actions where popgym
            has ``Discrete``/``MultiDiscrete`` spaces (``False``, GymEnv's default), or int64
            category indices (``True``); ``Bounded`` observations where popgym's ``Box`` is
            bounded. See :func:`~torchrl_ext.envs.popgym.make`. Defaults to ``None``.
    """

    #: The preset of each difficulty, handed to :meth:`_configure`.
    presets: ClassVar[Mapping[str, Any]]
    #: The bound of popgym's observation ``Box(-high, high)`` (``None``: discrete, or unbounded);
    #: GymEnv's layout makes the observation spec ``Bounded`` by it.
    observation_high: ClassVar[tuple[float, ...] | None] = None
    #: The layout's choice (see the constructor) and, when set, its converter.
    categorical_action_encoding: bool | None = None
    _gymenv: GymEnvLayout | None = None

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        *,
        difficulty: Difficulty = "easy",
        dtype: torch.dtype = torch.float32,
        capture: bool = False,
        categorical_action_encoding: bool | None = None,
    ) -> None:
        max_steps = self._configure(preset(difficulty, type(self).presets))
        if isinstance(max_steps, bool) or not isinstance(max_steps, int):
            raise TypeError(
                f"{type(self).__name__}._configure() must return max_steps, the most steps an "
                f"episode of the preset runs (an int), got {max_steps!r}."
            )
        if categorical_action_encoding is not None:
            check_bool("categorical_action_encoding", categorical_action_encoding)
        self.difficulty = difficulty
        super().__init__(num_envs, device, seed, max_steps=max_steps, dtype=dtype, capture=capture)
        self.categorical_action_encoding = categorical_action_encoding
        if categorical_action_encoding is not None:
            self._present_as_gymenv(bool(categorical_action_encoding))

    def _configure(self, preset: Any) -> int:
        """Set the env's sizes from ``preset``; return ``max_steps``."""
        raise NotImplementedError(f"{type(self).__name__} must implement _configure(preset).")

    def _repr_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"difficulty": self.difficulty}
        if self.categorical_action_encoding is not None:
            options["categorical_action_encoding"] = self.categorical_action_encoding
        return options

    # ------------------------------------------------------------------ specs
    def _discrete(self, n: int) -> Categorical:
        """One int64 choice in ``[0, n)`` per env."""
        return Categorical(n, shape=(self.num_envs,), dtype=torch.int64, device=self.device)

    def _multi(self, nvec: Sequence[int], dtype: torch.dtype = torch.int64) -> MultiCategorical:
        """``len(nvec)`` choices per env, the ``j``-th in ``[0, nvec[j])``, of ``dtype``."""
        shape = (self.num_envs, len(nvec))
        return MultiCategorical(list(nvec), shape=shape, dtype=dtype, device=self.device)

    def _set_specs(self, observation: TensorSpec, action: TensorSpec) -> None:
        """The ``"observation"`` entry, the action and a ``[N, 1]`` reward of the env's dtype."""
        n, dev = self.num_envs, self.device
        self.observation_spec = Composite(observation=observation, shape=(n,), device=dev)
        self.action_spec = action
        self.reward_spec = Unbounded(shape=(n, 1), dtype=self.dtype, device=dev)

    @property
    def _kernel_action_spec(self) -> TensorSpec:
        """The ``"action"`` spec the kernels read (category indices), in either layout."""
        if self._gymenv is None:
            return self.full_action_spec["action"]
        return self._gymenv.action.native

    # ------------------------------------------------------------------ GymEnv's layout
    def _present_as_gymenv(self, categorical: bool) -> None:
        """Replace the specs by GymEnv's; steps then convert at the TensorDict boundary."""
        native = self.observation_spec["observation"]
        high = type(self).observation_high
        self._gymenv = GymEnvLayout(native, self.action_spec, categorical, high)
        n, dev = self.num_envs, self.device
        public = self._gymenv.observation.public
        self.observation_spec = Composite(observation=public, shape=(n,), device=dev)
        self.action_spec = self._gymenv.action.public

    def _present(self, outputs: TensorDictBase) -> TensorDictBase:
        """The outputs in GymEnv's layout if the env presents it (idempotent)."""
        if self._gymenv is None:
            return outputs
        return self._gymenv.present(outputs)

    def _kernel_actions(self, tensordict: TensorDictBase) -> TensorDictBase:
        """In GymEnv's one-hot layout, the actions' category indices (malformed ones refused)."""
        if self._gymenv is None:
            return tensordict
        fault = self.action_fault if self.sync_free else None
        return self._gymenv.accept(tensordict, self.device, fault)

    def _random_actions(self, steps: int) -> dict[Any, torch.Tensor]:
        """``[N, T, ...]`` uniform category indices, drawn from the kernels' action spec."""
        return {"action": actions.draw_steps(self._kernel_action_spec, steps).movedim(0, 1)}


# ---------------------------------------------------------------------- state-value checks
def require_range(
    name: str, values: torch.Tensor, low: float, high: float, what: str, *, closed: bool = False
) -> None:
    """``values`` lie in ``[low, high)`` (``[low, high]`` if ``closed``)."""
    ok = (values >= low) & ((values <= high) if closed else (values < high))
    require(name, values, ok, f"{what} lie in [{low}, {high}{']' if closed else ')'}")


def require_in(name: str, values: torch.Tensor, allowed: tuple[int, ...]) -> None:
    """Every entry of ``values`` is one of ``allowed``."""
    ok = torch.zeros_like(values, dtype=torch.bool)
    for value in allowed:
        ok |= values == value
    require(name, values, ok, f"entries are one of {allowed}")


def require_envs(name: str, ok: torch.Tensor, why: str) -> None:
    """Every env passes ``ok`` (``[num_envs]`` bool), a test of its row of ``state_dict[name]``."""
    if not bool(ok.all()):
        env = int((~ok).nonzero()[0, 0])
        raise ValueError(
            f"state_dict[{name!r}] holds, in env {env}, a state no run of this env reaches "
            f"({why}); load a state saved by state_dict()."
        )


def require_shuffled(name: str, decks: torch.Tensor, begun: torch.Tensor) -> None:
    """Each row of ``decks`` whose env has ``begun`` an episode is a permutation of ``0 .. N-1``."""
    n = decks.shape[-1]
    ids = torch.arange(n, dtype=decks.dtype, device=decks.device)
    shuffled = (decks.sort(dim=-1).values == ids).all(dim=-1)
    why = f"once an episode has begun, each deck is a permutation of 0..{n - 1}"
    require_envs(name, shuffled | ~begun, why)
