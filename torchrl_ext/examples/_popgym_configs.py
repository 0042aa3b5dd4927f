"""The ``Config`` of the POPGym pipelines (PPO and R2D2), and the results table's rows.

* :func:`check_task`: the ``env`` and ``difficulty`` fields of a run's config, checked.
* :class:`PPOPopGymConfig` (``ppo_popgym.Config``), :class:`RepeatFirstConfig`,
  :class:`MultiarmedBanditConfig` and :func:`config_class`, the config of each env;
  :class:`R2D2PopGymConfig` (``r2d2_popgym.Config``); each with its defaults and the overrides
  its ``--quick`` applies. The pipelines import these names back and are where they are used
  and documented.
* :data:`ROWS`, :data:`QUICK_ROWS`: the envs ``popgym-results`` trains; :func:`table_rows`,
  :func:`table_folder` and :func:`seed_folder`: those a command line asks for, and where.

Torch-free, as ``_configs`` is, so that the command line builds a new run's config, and refuses
a bad one in one line, before it imports the pipeline.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from torchrl_ext.examples._configs import (
    R2D2_CARTPOLE_QUICK,
    PPOCartPoleConfig,
    R2D2CartPoleConfig,
)
from torchrl_ext.examples._popgym_paper import DIFFICULTIES, ENVS, SINGLE_DISCRETE, reference


def check_task(cfg: Any) -> None:
    """Checks ``cfg.env`` (one of :data:`ENVS`) and ``cfg.difficulty``; ``ValueError`` if not.

    Examples:
        >>> from types import SimpleNamespace
        >>> check_task(SimpleNamespace(env="RepeatFirst", difficulty="hard"))
        >>> check_task(SimpleNamespace(env="RepeatFirst", difficulty="extreme"))
        Traceback (most recent call last):
        ...
        ValueError: difficulty must be 'easy', 'medium' or 'hard', got difficulty='extreme'.
    """
    if cfg.env not in ENVS:
        raise ValueError(f"env must be one of {', '.join(ENVS)}, got env={cfg.env!r}.")
    if cfg.difficulty not in DIFFICULTIES:
        raise ValueError(
            f"difficulty must be 'easy', 'medium' or 'hard', got difficulty={cfg.difficulty!r}."
        )


# ---------------------------------------------------------------------------- ppo_popgym
PPO_POPGYM_SIZE = dict(frames=2_097_152, num_envs=64, steps=64, eval_episodes=64)
PPO_POPGYM_LEARNING = dict(lr=5e-4, gamma=0.99, max_grad_norm=0.5, epochs=4, lmbda=0.95)


@dataclasses.dataclass(kw_only=True)
class PPOPopGymConfig(PPOCartPoleConfig, **PPO_POPGYM_SIZE, **PPO_POPGYM_LEARNING):
    """Hyperparameters of one run on a POPGym port.

    The fields of :class:`~torchrl_ext.examples.ppo_cartpole.Config`, with these defaults
    (``obs_scale`` is unused: observations are one-hot or passed as they are), then:

    Args:
        env (str): POPGym's name of the env, one of
            :data:`~torchrl_ext.examples._popgym_paper.ENVS`.
        difficulty (str): ``"easy"``, ``"medium"`` or ``"hard"``.
        forget_bias (float): initial bias of the LSTMs' forget gates (PyTorch's initialization
            draws it around 0, so memory fades by about half per step at first; a bias of a few
            units keeps what the first steps saw long enough for the gradient to reach it).
        previous_action (bool): feed the previous step's action to both networks
            (:class:`~torchrl_ext.envs.transforms.PreviousAction`), as POPGym's baselines do:
            without it a bandit player cannot tell which arm its last reward came from.

    The ``target`` defaults to the paper's MMER of the env and difficulty (PPO-LSTM, else
    PPO-GRU: :func:`~torchrl_ext.examples._popgym_paper.reference`), or 1.0, the highest
    return, where there is none.

    Examples:
        >>> cfg = PPOPopGymConfig(env="RepeatPrevious", frames=8192)
        >>> cfg.difficulty, cfg.return_window, cfg.frames_per_batch
        ('easy', 100, 4096)
        >>> PPOPopGymConfig(env="Pong")
        Traceback (most recent call last):
        ...
        ValueError: env must be one of RepeatFirst, RepeatPrevious, Autoencode, CountRecall, \
HigherLower, Concentration, MultiarmedBandit, MineSweeper, Battleship, PositionOnlyCartPole, \
VelocityOnlyCartPole, NoisyPositionOnlyCartPole, PositionOnlyPendulum, \
NoisyPositionOnlyPendulum, got env='Pong'.
    """

    env: str = "RepeatPrevious"
    difficulty: str = "easy"
    forget_bias: float = 0.0
    previous_action: bool = True
    envs_per_minibatch: int = 16
    return_window: int = 100
    reward_scale: float = 1.0
    target: float | None = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        check_task(self)
        if self.target is None:
            paper = reference(self.env, self.difficulty)
            self.target = 1.0 if paper is None else paper
        super().__post_init__()


@dataclasses.dataclass(kw_only=True)
class RepeatFirstConfig(PPOPopGymConfig, env="RepeatFirst", forget_bias=3.0):
    """:class:`PPOPopGymConfig` for RepeatFirst: the LSTMs' forget gates start with a bias of 3.

    The agent must name the first card of the deck at every step, so the LSTM must keep it
    over the whole episode (52 steps at Easy); with PyTorch's initial forget gates the memory
    of that card fades within a few steps and the return stays at chance (-0.5) for the
    budget.
    """


#: About the paper's budget of 15M frames, and no more: 7 times :class:`PPOPopGymConfig`'s
#: default of 2,097,152 frames.
PAPER_BUDGET = 14_680_064


@dataclasses.dataclass(kw_only=True)
class MultiarmedBanditConfig(PPOPopGymConfig, env="MultiarmedBandit", frames=PAPER_BUDGET):
    """:class:`PPOPopGymConfig` for MultiarmedBandit: the paper's budget of frames, not a seventh.

    The agent must find the best of 10 arms by pulling them, then keep pulling it, over a
    200-pull episode. Its mean return still climbs at 2,097,152 frames, the other envs' budget,
    and its best 100-episode windows come late in the paper's budget; nothing else differs.

    Examples:
        >>> cfg = MultiarmedBanditConfig(seed=1)
        >>> cfg.env, cfg.frames, cfg.frames // PPOPopGymConfig().frames
        ('MultiarmedBandit', 14680064, 7)
    """


#: The envs whose settings differ from :class:`PPOPopGymConfig`'s, and their configs.
CONFIGS: dict[str, type[PPOPopGymConfig]] = {
    "RepeatFirst": RepeatFirstConfig,
    "MultiarmedBandit": MultiarmedBanditConfig,
}


def config_class(env: str) -> type[PPOPopGymConfig]:
    """The config class of ``env``: its own where it has one, else :class:`PPOPopGymConfig`.

    Examples:
        >>> config_class("RepeatFirst")().forget_bias, config_class("HigherLower")().forget_bias
        (3.0, 0.0)
        >>> config_class("MultiarmedBandit")().frames, config_class("HigherLower")().frames
        (14680064, 2097152)
    """
    return CONFIGS.get(env, PPOPopGymConfig)


PPO_POPGYM_QUICK = {
    "epochs": 2,
    "num_envs": 8,
    "steps": 32,
    "eval_episodes": 4,
    "envs_per_minibatch": 4,
}


# ---------------------------------------------------------------------------- r2d2_popgym
R2D2_POPGYM_SIZE = dict(frames=2_097_152, num_envs=16, steps=4, eval_episodes=64)
R2D2_POPGYM_LEARNING = dict(lr=5e-4, gamma=0.99, max_grad_norm=10.0)


@dataclasses.dataclass(kw_only=True)
class R2D2PopGymConfig(R2D2CartPoleConfig, **R2D2_POPGYM_SIZE, **R2D2_POPGYM_LEARNING):
    """Hyperparameters of one R2D2 run on a POPGym port.

    The fields of :class:`~torchrl_ext.examples.r2d2_cartpole.Config` with these defaults, then:

    Args:
        env (str): POPGym's name of the env: one of
            :data:`~torchrl_ext.examples._popgym_paper.ENVS` with a single discrete action.
        difficulty (str): ``"easy"``, ``"medium"`` or ``"hard"``.
        forget_bias (float): initial bias of the LSTM's forget gates.
        previous_action (bool): feed the previous step's action to the Q-network.

    ``target`` defaults to 1.0, the best return of every POPGym env.

    Examples:
        >>> cfg = R2D2PopGymConfig(env="HigherLower")
        >>> cfg.window, cfg.return_window
        (28, 100)
        >>> R2D2PopGymConfig(env="Battleship")
        Traceback (most recent call last):
        ...
        ValueError: env must have a single discrete action for --algo r2d2 (use --algo ppo), \
got env='Battleship'.
    """

    env: str = "RepeatPrevious"
    difficulty: str = "easy"
    forget_bias: float = 0.0
    previous_action: bool = True
    return_window: int = 100
    target: float = 1.0
    eps_frames: int = 200_000

    def __post_init__(self) -> None:
        check_task(self)
        if self.env not in SINGLE_DISCRETE:
            raise ValueError(
                "env must have a single discrete action for --algo r2d2 (use --algo ppo), "
                f"got env={self.env!r}."
            )
        super().__post_init__()


R2D2_POPGYM_QUICK = {**R2D2_CARTPOLE_QUICK, "eval_episodes": 4}


# ---------------------------------------------------------------------------- popgym_results
#: The table's rows: ``(env, difficulty)``, the 8 Easy envs with published reference figures.
ROWS = (
    ("RepeatFirst", "easy"),
    ("RepeatPrevious", "easy"),
    ("Autoencode", "easy"),
    ("CountRecall", "easy"),
    ("HigherLower", "easy"),
    ("MultiarmedBandit", "easy"),
    ("PositionOnlyCartPole", "easy"),
    ("NoisyPositionOnlyCartPole", "easy"),
)

#: The rows a ``--quick`` run trains.
QUICK_ROWS = (("RepeatPrevious", "easy"), ("MultiarmedBandit", "easy"))


def table_rows(args: Any) -> list[tuple[str, str]]:
    """The rows a ``popgym-results`` command line trains: those of ``--envs``, in table order.

    Examples:
        >>> from argparse import Namespace
        >>> table_rows(Namespace(quick=True, envs=["MultiarmedBandit", "RepeatFirst"]))
        [('MultiarmedBandit', 'easy')]
    """
    return [row for row in (QUICK_ROWS if args.quick else ROWS) if row[0] in args.envs]


def table_folder(args: Any) -> Path:
    """``--out``, or ``runs/popgym_results`` (``runs/quick/popgym_results`` with ``--quick``)."""
    return args.out or Path("runs") / ("quick" if args.quick else "") / "popgym_results"


def seed_folder(out: Path, env: str, difficulty: str, seed: int) -> Path:
    """The run folder of a row's ``seed`` in the table's folder ``out``.

    Examples:
        >>> seed_folder(Path("runs"), "RepeatFirst", "easy", 2).as_posix()
        'runs/RepeatFirst-easy/seed2'
    """
    return out / f"{env}-{difficulty}" / f"seed{seed}"
