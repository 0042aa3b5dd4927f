"""Switching from TorchRL's ``GymEnv``: the POPGym ports by popgym's names, in GymEnv's layout.

``GymEnv("popgym-RepeatPreviousEasy-v0")`` becomes ``make("popgym-RepeatPreviousEasy-v0",
num_envs)``: the same observation, action, reward and done specs, keys and dtypes (one-hot where
GymEnv gives one-hot), selected by the same ``categorical_action_encoding`` switch, batched over
``num_envs`` envs stepped by Warp kernels. One difference is GymEnv's own: it cannot run
Autoencode (popgym's ``Tuple`` observation becomes a ``Stacked`` spec its reset cannot fill, in
torchrl 0.14); the port presents that observation as TorchRL presents a ``MultiDiscrete([2, 4])``:
the same two components, as ``MultiOneHot`` (6 slots) or ``MultiCategorical``.
"""

from __future__ import annotations

import difflib

import torch

from torchrl_ext._checks import check_bool
from torchrl_ext.envs.popgym._port import PopGymEnv
from torchrl_ext.envs.popgym.cards import (
    AutoencodeEnv,
    CountRecallEnv,
    RepeatFirstEnv,
    RepeatPreviousEnv,
)
from torchrl_ext.envs.popgym.control import (
    NoisyPositionOnlyCartPoleEnv,
    NoisyPositionOnlyPendulumEnv,
    PositionOnlyCartPoleEnv,
    PositionOnlyPendulumEnv,
    VelocityOnlyCartPoleEnv,
)
from torchrl_ext.envs.popgym.games import BattleshipEnv, MineSweeperEnv, MultiarmedBanditEnv
from torchrl_ext.envs.popgym.guessing import ConcentrationEnv, HigherLowerEnv

__all__ = ["ENV_NAMES", "make"]

#: popgym's name of each task (``VelocityOnlyCartpole`` is spelled as popgym spells it).
_TASKS: dict[str, type[PopGymEnv]] = {
    "RepeatFirst": RepeatFirstEnv,
    "RepeatPrevious": RepeatPreviousEnv,
    "Autoencode": AutoencodeEnv,
    "CountRecall": CountRecallEnv,
    "HigherLower": HigherLowerEnv,
    "Concentration": ConcentrationEnv,
    "MultiarmedBandit": MultiarmedBanditEnv,
    "MineSweeper": MineSweeperEnv,
    "Battleship": BattleshipEnv,
    "PositionOnlyCartPole": PositionOnlyCartPoleEnv,
    "VelocityOnlyCartpole": VelocityOnlyCartPoleEnv,
    "NoisyPositionOnlyCartPole": NoisyPositionOnlyCartPoleEnv,
    "PositionOnlyPendulum": PositionOnlyPendulumEnv,
    "NoisyPositionOnlyPendulum": NoisyPositionOnlyPendulumEnv,
}
_LEVELS = {"Easy": "easy", "Medium": "medium", "Hard": "hard"}

#: popgym's 42 env names (``"RepeatPreviousEasy"``); gymnasium's ids are ``popgym-<name>-v0``.
ENV_NAMES: tuple[str, ...] = tuple(f"{task}{level}" for task in _TASKS for level in _LEVELS)


def _lookup(env_name: object) -> tuple[type[PopGymEnv], str]:
    """The port and difficulty of a popgym name or gymnasium id, checked."""
    if not isinstance(env_name, str):
        raise TypeError(
            f"env_name must be a str such as 'popgym-RepeatPreviousEasy-v0', got "
            f"env_name={env_name!r} of type {type(env_name).__name__}."
        )
    name = env_name.removeprefix("popgym-").removesuffix("-v0")
    for level, difficulty in _LEVELS.items():
        task = name.removesuffix(level)
        if task != name and task in _TASKS:
            return _TASKS[task], difficulty
    close = difflib.get_close_matches(name, ENV_NAMES, n=1)
    hint = f" Did you mean {f'popgym-{close[0]}-v0'!r}?" if close else ""
    raise ValueError(
        "env_name must be a popgym env's gymnasium id or name, e.g. "
        f"'popgym-RepeatPreviousEasy-v0' or 'RepeatPreviousEasy' (see ENV_NAMES), got "
        f"env_name={env_name!r}.{hint}"
    )


def make(
    env_name: str,
    num_envs: int,
    device: torch.device | str = "cpu",
    seed: int | None = None,
    *,
    categorical_action_encoding: bool = False,
    dtype: torch.dtype = torch.float32,
    capture: bool = False,
) -> PopGymEnv:
    """The POPGym port named ``env_name``, with the specs TorchRL's ``GymEnv`` gives for it.

    Observations and actions are one-hot int64 where popgym's space is ``Discrete`` or
    ``MultiDiscrete`` (``[n]`` and ``[k, n]``; ``categorical_action_encoding=True``: int64
    category indices, ``[]`` and ``[k]``), floats ``Bounded`` where popgym's ``Box`` is; the
    keys, the ``[1]`` float32 reward and the three ``[1]`` bool done flags are GymEnv's, behind
    a leading ``num_envs`` batch dim. Actions are checked as the ports check theirs: a one-hot
    action must be int64 with a single 1 per row.

    Args:
        env_name (str): gymnasium's id (``"popgym-RepeatPreviousEasy-v0"``, what ``GymEnv``
            takes) or popgym's class name (``"RepeatPreviousEasy"``); see :data:`ENV_NAMES`.
        num_envs (int): number of envs stepped together (the batch size).
        device (torch.device or str, optional): device of state and outputs. Defaults to ``"cpu"``.
        seed (int, optional): 64-bit seed. Defaults to ``None`` (drawn from torch's generator).

    Keyword Args:
        categorical_action_encoding (bool, optional): GymEnv's switch: category indices instead
            of one-hot. Defaults to ``False``, as in GymEnv.
        dtype (torch.dtype, optional): float dtype of observations and rewards; GymEnv's is
            ``torch.float32``. Defaults to ``torch.float32``.
        capture (bool, optional): replay recorded Warp graphs. Defaults to ``False``.

    Returns:
        The port (e.g. a :class:`~torchrl_ext.envs.popgym.RepeatPreviousEnv`) at the name's
        difficulty, built with ``categorical_action_encoding``.

    Raises:
        TypeError: if ``env_name`` is not a str or ``categorical_action_encoding`` not a bool.
        ValueError: if ``env_name`` names no popgym env.

    Examples:
        >>> import torch
        >>> from torchrl_ext.envs.popgym import make
        >>> env = make("popgym-RepeatPreviousEasy-v0", num_envs=3, seed=0)
        >>> type(env).__name__, env.difficulty, env.action_spec.shape
        ('RepeatPreviousEnv', 'easy', torch.Size([3, 4]))
        >>> root = env.reset()
        >>> root["observation"].dtype, root["observation"].sum(-1).tolist()
        (torch.int64, [1, 1, 1])
        >>> root["action"] = torch.eye(4, dtype=torch.int64)[[0, 1, 3]]
        >>> env.step(root)["next", "observation"].shape
        torch.Size([3, 4])
        >>> make("RepeatPreviousEasy", 3, categorical_action_encoding=True).action_spec.shape
        torch.Size([3])
    """
    env_type, difficulty = _lookup(env_name)
    categorical = check_bool("categorical_action_encoding", categorical_action_encoding)
    return env_type(
        num_envs,
        device,
        seed,
        difficulty=difficulty,
        dtype=dtype,
        capture=capture,
        categorical_action_encoding=categorical,
    )
