"""sb3-contrib's ``RecurrentPPO`` on POPGym's own gymnasium env, with the POPGym demo's settings.

Needs ``stable-baselines3``, ``sb3-contrib`` and ``popgym``; importing this module without them
raises ``ImportError``.

The env is POPGym's class for the task and difficulty (``popgym.envs.RepeatPreviousEasy``),
wrapped in POPGym's own ``PreviousAction`` (the observation becomes the tuple (observation,
previous action)) and ``Flatten`` (the tuple becomes one one-hot ``Box``, the features our demo
builds from a ``Categorical`` observation and its one-hot previous action), then sb3's
``Monitor`` (for the episode returns), 64 copies in a ``DummyVecEnv``, copy ``i`` seeded with
``seed + i``. The model is :func:`.sb3_recurrent_ppo.make_model`, the CartPole baseline's, with
these :class:`Args`; :func:`train` returns the CartPole baseline's :class:`.cleanrl_lstm_ppo.Run`
(per batch frames, seconds and the returns of the episodes that ended in it), its clock started
after sb3's set-up and first reset, as :class:`.sb3_recurrent_ppo.History` reads it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import gymnasium as gym
import popgym.envs
from popgym.wrappers import Flatten, PreviousAction
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv

from _ppo_baselines.cleanrl_lstm_ppo import Run
from _ppo_baselines.sb3_recurrent_ppo import History, make_model


@dataclasses.dataclass
class Args:
    """The run's settings; the names are those :func:`.sb3_recurrent_ppo.make_model` reads.

    The defaults are ``examples/ppo_popgym.py``'s (``ppo_popgym.Args``) at 262,144 frames.
    """

    seed: int = 0
    """seed of the envs (copy ``i``: ``seed + i``), the network initialization and the actions"""
    env: str = "RepeatPrevious"
    """POPGym's name of the env"""
    difficulty: str = "easy"
    """POPGym's difficulty: easy, medium or hard"""
    total_frames: int = 262_144
    """frames collected in total; learning rate and clip range reach 0 there"""
    num_envs: int = 64
    """parallel envs"""
    num_steps: int = 64
    """steps per env per batch"""
    learning_rate: float = 5e-4
    """Adam's initial learning rate"""
    adam_eps: float = 1e-5
    """Adam's epsilon"""
    gamma: float = 0.99
    """discount"""
    gae_lambda: float = 0.95
    """GAE lambda"""
    update_epochs: int = 4
    """passes over each batch"""
    envs_per_minibatch: int = 16
    """minibatch size in rows of ``num_steps`` (sb3's ``batch_size`` is this times num_steps)"""
    clip_coef: float = 0.2
    """initial PPO clip range"""
    vf_coef: float = 0.5
    """weight of the value loss"""
    max_grad_norm: float = 0.5
    """gradient-norm clip (sb3: over all parameters at once)"""
    hidden: int = 64
    """LSTM hidden size (actor and critic each)"""
    head: int = 64
    """width of the hidden ReLU layer of each head"""

    @property
    def batch_frames(self) -> int:
        """Frames per batch, ``num_envs * num_steps``."""
        return self.num_envs * self.num_steps


def env_maker(env: str, difficulty: str) -> Callable[[], gym.Env]:
    """A function making one POPGym env of ``env`` at ``difficulty``, its previous action added.

    Examples:
        >>> make = env_maker("RepeatPrevious", "easy")
        >>> make().observation_space.shape  # one-hot suit and one-hot previous suit
        (8,)
    """
    env_class = getattr(popgym.envs, env + difficulty.capitalize())
    return lambda: Flatten(PreviousAction(env_class()))


class EpisodeHistory(History):
    """:class:`.sb3_recurrent_ppo.History` for a ``VecEnv`` of ``Monitor``-wrapped envs.

    Each step's infos carry ``episode`` (its return) for the episodes that ended; they are kept
    in :attr:`completed`, which ``History`` reads from its ``env`` (here this callback) and
    empties after each batch.
    """

    def __init__(self) -> None:
        self.completed: list[float] = []
        super().__init__(env=self)

    def _on_step(self) -> bool:
        infos = self.locals["infos"]
        self.completed += [info["episode"]["r"] for info in infos if "episode" in info]
        return True


def train(args: Args) -> Run:
    """Trains one seed with ``RecurrentPPO.learn``; seconds count from the first batch.

    The returned ``final_eval`` is NaN: the benchmark judges runs by their training returns.
    """
    vec_env = make_vec_env(
        env_maker(args.env, args.difficulty),
        n_envs=args.num_envs,
        seed=args.seed,
        vec_env_cls=DummyVecEnv,
    )
    model = make_model(args, vec_env)
    history = EpisodeHistory()
    model.learn(total_timesteps=args.total_frames, callback=history)
    vec_env.close()
    return Run(history.history, history.timings, math.nan)
