"""POPGym's memory tasks as batched Warp envs, matched step for step to the ``popgym`` package.

Each env takes ``difficulty="easy" | "medium" | "hard"`` (POPGym's Easy/Medium/Hard presets) and
is written on :class:`~torchrl_ext.envs.WarpEnv`'s authoring contract: specs, per-env state and
three Warp functions. One module per family: ``cards`` (recall from a shuffled deck),
``guessing`` (guess the next card, find pairs), ``games`` (bandits, boards) and ``control``
(partially observed cart-pole and pendulum). :func:`make` builds a port by popgym's name
(``"popgym-RepeatPreviousEasy-v0"``) with the specs TorchRL's ``GymEnv`` gives for it.
"""

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
from torchrl_ext.envs.popgym.gymenv import ENV_NAMES, make

__all__ = [
    "ENV_NAMES",
    "AutoencodeEnv",
    "BattleshipEnv",
    "ConcentrationEnv",
    "CountRecallEnv",
    "HigherLowerEnv",
    "MineSweeperEnv",
    "MultiarmedBanditEnv",
    "NoisyPositionOnlyCartPoleEnv",
    "NoisyPositionOnlyPendulumEnv",
    "PositionOnlyCartPoleEnv",
    "PositionOnlyPendulumEnv",
    "RepeatFirstEnv",
    "RepeatPreviousEnv",
    "VelocityOnlyCartPoleEnv",
    "make",
]
