"""POPGym's env names and the figures its paper publishes, for the POPGym pipeline and its page.

Torch-free, so that the command line can list the envs without importing a pipeline.
"""

from __future__ import annotations

#: The ported envs, by POPGym's name (the class is ``<name>Env`` in
#: :mod:`torchrl_ext.envs.popgym`).
ENVS = (
    "RepeatFirst",
    "RepeatPrevious",
    "Autoencode",
    "CountRecall",
    "HigherLower",
    "Concentration",
    "MultiarmedBandit",
    "MineSweeper",
    "Battleship",
    "PositionOnlyCartPole",
    "VelocityOnlyCartPole",
    "NoisyPositionOnlyCartPole",
    "PositionOnlyPendulum",
    "NoisyPositionOnlyPendulum",
)

#: The envs whose action is not one discrete choice: a board cell (MineSweeper, Battleship) or
#: a torque (the pendulums).
NOT_SINGLE_DISCRETE = (
    "MineSweeper",
    "Battleship",
    "PositionOnlyPendulum",
    "NoisyPositionOnlyPendulum",
)

#: The envs whose action is one discrete choice: what R2D2's Q-network scores.
SINGLE_DISCRETE = tuple(name for name in ENVS if name not in NOT_SINGLE_DISCRETE)

#: POPGym's difficulty presets.
DIFFICULTIES = ("easy", "medium", "hard")

#: POPGym's PPO-LSTM MMER (mean over its trials) per ``(env, difficulty)``: Morad et al., ICLR
#: 2023, appendix table of results per model and env.
PAPER_PPO_LSTM: dict[tuple[str, str], float] = {}
