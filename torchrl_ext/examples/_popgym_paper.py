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

#: Where the reference MMERs come from: the paper's appendix table (MMER of PPO with each of its
#: 13 memory models, mean and standard deviation over 3 trials of 15M steps, RLlib), as
#: transcribed in a public repository; not checked against the paper itself.
SOURCE = (
    "Morad et al., POPGym: Benchmarking Partially Observable Reinforcement Learning, ICLR 2023, "
    "appendix table of MMER per model (3 trials, 15M steps); values as transcribed in "
    "github.com/bryjudy/fly-critic (flycritic/popgym/results.py, a93e8b9), not checked against "
    "the paper"
)

#: Frames per trial in the paper.
PAPER_FRAMES = 15_000_000

#: The paper's PPO-GRU MMER, ``(mean, standard deviation)`` over its 3 trials, per
#: ``(env, difficulty)`` (see :data:`SOURCE`).
PAPER_PPO_GRU: dict[tuple[str, str], tuple[float, float]] = {
    ("RepeatFirst", "easy"): (1.000, 0.000),
    ("RepeatFirst", "medium"): (1.000, 0.000),
    ("RepeatFirst", "hard"): (0.940, 0.012),
    ("RepeatPrevious", "easy"): (1.000, 0.000),
    ("RepeatPrevious", "medium"): (-0.315, 0.017),
    ("RepeatPrevious", "hard"): (-0.428, 0.002),
    ("Autoencode", "easy"): (-0.283, 0.029),
    ("Autoencode", "medium"): (-0.425, 0.018),
    ("Autoencode", "hard"): (-0.456, 0.009),
    ("CountRecall", "easy"): (0.177, 0.005),
    ("CountRecall", "medium"): (-0.528, 0.001),
    ("CountRecall", "hard"): (-0.475, 0.006),
    ("HigherLower", "easy"): (0.529, 0.002),
    ("HigherLower", "medium"): (0.511, 0.002),
    ("HigherLower", "hard"): (0.506, 0.001),
    ("MultiarmedBandit", "easy"): (0.619, 0.007),
    ("MultiarmedBandit", "medium"): (0.538, 0.036),
    ("MultiarmedBandit", "hard"): (0.516, 0.083),
    ("PositionOnlyCartPole", "easy"): (1.000, 0.000),
    ("PositionOnlyCartPole", "medium"): (1.000, 0.000),
    ("PositionOnlyCartPole", "hard"): (1.000, 0.000),
    ("NoisyPositionOnlyCartPole", "easy"): (0.995, 0.000),
    ("NoisyPositionOnlyCartPole", "medium"): (0.642, 0.012),
    ("NoisyPositionOnlyCartPole", "hard"): (0.390, 0.007),
}

#: The paper's PPO-LSTM MMER (mean over its trials) where the transcription gives it: as the
#: best model of CountRecall Easy, and as a model tied at 1.0 on PositionOnlyCartPole (the
#: paper's StatelessCartPole).
PAPER_PPO_LSTM: dict[tuple[str, str], float] = {
    ("CountRecall", "easy"): 0.509,
    ("PositionOnlyCartPole", "easy"): 1.000,
    ("PositionOnlyCartPole", "medium"): 1.000,
    ("PositionOnlyCartPole", "hard"): 1.000,
}


def reference(env: str, difficulty: str) -> float | None:
    """The paper's PPO-LSTM MMER of ``env`` at ``difficulty``, else its PPO-GRU one, else ``None``.

    Examples:
        >>> reference("CountRecall", "easy"), reference("HigherLower", "easy")
        (0.509, 0.529)
        >>> reference("Battleship", "easy") is None
        True
    """
    if (env, difficulty) in PAPER_PPO_LSTM:
        return PAPER_PPO_LSTM[env, difficulty]
    gru = PAPER_PPO_GRU.get((env, difficulty))
    return None if gru is None else gru[0]
