"""The ``Config`` of the CartPole, course and signalling pipelines, with their defaults.

One section per pipeline: its defaults of the fields that
:class:`~torchrl_ext.examples._config.TrainConfig` (or
:class:`~torchrl_ext.examples._config.PPOConfig`) declares, its ``Config`` and the overrides
its ``--quick`` applies. Each pipeline imports its names back (``ppo_cartpole.Config`` is
:class:`PPOCartPoleConfig`), so they are used and documented from there.

Torch-free, so that the command line builds a new run's config, and refuses a bad one in one
line, before it imports the pipeline; the POPGym pipelines' configs, which extend two of these,
are in ``_popgym_configs``.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from torchrl_ext._checks import check_bool, check_float, check_int
from torchrl_ext.examples._config import PPOConfig, TrainConfig

#: A network's memory: recurrent (an LSTM) or feed-forward (an MLP).
PolicyKind = Literal["lstm", "mlp"]


# ---------------------------------------------------------------------------- ppo_cartpole
#: ``ppo_cartpole``'s defaults of the fields declared in :class:`PPOConfig`: the run's size,
#: then learning.
PPO_CARTPOLE_SIZE = dict(frames=61_440, num_envs=16, steps=32, eval_episodes=16)
PPO_CARTPOLE_LEARNING = dict(lr=1.5e-3, gamma=0.98, max_grad_norm=0.5, epochs=8, lmbda=0.8)


@dataclasses.dataclass(kw_only=True)
class PPOCartPoleConfig(PPOConfig, **PPO_CARTPOLE_SIZE, **PPO_CARTPOLE_LEARNING):
    """Hyperparameters of one run (defaults: the tuned recurrent PPO).

    The fields of :class:`~torchrl_ext.examples._config.PPOConfig` (``seed`` to
    ``critic_coeff``; ``hidden`` is the LSTM's, or the first MLP layer's, width, and ``lr`` and
    ``clip`` decay linearly to zero over ``frames``) with this pipeline's defaults, then:

    Args:
        policy (str): ``"lstm"`` (recurrent actor and critic) or ``"mlp"`` (feed-forward).
        envs_per_minibatch (int): env rows per minibatch.
        head (int): width of the hidden layer of the actor and critic heads.
        target (float): mean episode return that counts as solved.
        return_window (int): completed episodes averaged into the mean return.
        obs_scale (tuple of float): factors applied to cart position and pole angle. Constant
            factors play the role of sb3's VecNormalize without running statistics that
            training and evaluation would have to share; the defaults bring the small per-step
            changes the LSTM must difference to order 0.1.
        reward_scale (float): factor applied to the reward the learner sees (episode returns
            are logged unscaled), so value targets stay of order 1 (VecNormalize's reward
            normalization, as a constant).
    """

    policy: PolicyKind = "lstm"
    envs_per_minibatch: int = 8
    head: int = 64
    target: float = 475.0
    return_window: int = 20
    obs_scale: tuple[float, float] = (2.0, 20.0)
    reward_scale: float = 0.1

    def __post_init__(self) -> None:
        if self.policy not in ("lstm", "mlp"):
            raise ValueError(f"policy must be 'lstm' or 'mlp', got policy={self.policy!r}.")
        super().__post_init__()
        self.check_ints("envs_per_minibatch")


PPO_CARTPOLE_QUICK = {"epochs": 2, "eval_episodes": 4}


# ---------------------------------------------------------------------------- r2d2_cartpole
#: ``r2d2_cartpole``'s defaults of the fields declared in :class:`TrainConfig`: the run's size,
#: then learning.
R2D2_CARTPOLE_SIZE = dict(frames=400_000, num_envs=16, steps=4, eval_episodes=16)
R2D2_CARTPOLE_LEARNING = dict(lr=5e-4, gamma=0.98, max_grad_norm=10.0)


@dataclasses.dataclass(kw_only=True)
class R2D2CartPoleConfig(TrainConfig, **R2D2_CARTPOLE_SIZE, **R2D2_CARTPOLE_LEARNING):
    """Hyperparameters of one run.

    The fields of :class:`~torchrl_ext.examples._config.TrainConfig` (``seed`` to
    ``eval_episodes``; one update follows each batch of ``num_envs * steps`` frames, ``hidden``
    is the embedding, LSTM and head width) with this pipeline's defaults, then:

    Args:
        warmup_frames (int): frames collected before the first update.
        capacity (int): replay capacity in records (time x envs).
        burn_in (int): burn-in records per window.
        length (int): learning records per window.
        n_step (int): return horizon; windows carry ``n_step - 1`` bootstrap records.
        batch_size (int): windows per update.
        value_rescaling (bool): R2D2's ``h(x)`` on the targets (it also learns faster here).
        lr_decay_start (float): fraction of the frame budget after which the learning rate
            decays linearly from ``lr`` to ``lr_end``.
        lr_end (float): learning rate at the end of the frame budget.
        target_period (int): updates between target-network copies.
        alpha (float): priority exponent.
        beta (float): importance-sampling exponent.
        eta (float): weight of the max in the per-anchor priority mixture.
        eps_frames (int): frames of linear exploration decay from 1 to ``eps_end``.
        eps_end (float): exploration rate after the decay.
        eps_lanes (float): per-env floor: env ``i`` of ``N`` explores at least
            ``eps_lanes ** (1 + 2 * i / (N - 1))``, so a few envs keep exploring.
        return_window (int): completed episodes averaged into the mean return.
        target (float): the mean return whose first crossing is reported.
        log_every (int): batches between log rows.

    Examples:
        >>> cfg = R2D2CartPoleConfig(seed=3, burn_in=4, length=8)
        >>> cfg.window, cfg.frames_per_batch
        (16, 64)
    """

    warmup_frames: int = 2_048
    capacity: int = 100_000
    burn_in: int = 8
    length: int = 16
    n_step: int = 5
    batch_size: int = 32
    value_rescaling: bool = True
    lr_decay_start: float = 0.5
    lr_end: float = 5e-5
    target_period: int = 100
    alpha: float = 0.9
    beta: float = 0.6
    eta: float = 0.9
    eps_frames: int = 100_000
    eps_end: float = 0.01
    eps_lanes: float = 0.1
    return_window: int = 32
    target: float = 400.0
    log_every: int = 16

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check_ints("warmup_frames", "capacity", "length", "n_step", "batch_size")
        self.check_ints("target_period", "eps_frames", "return_window", "log_every")
        self.burn_in = check_int("burn_in", self.burn_in, minimum=0)
        self.value_rescaling = check_bool("value_rescaling", self.value_rescaling)
        for name in ("lr_decay_start", "eta", "eps_end", "eps_lanes"):
            setattr(self, name, check_float(name, getattr(self, name), 0.0, 1.0))
        self.lr_end = check_float("lr_end", self.lr_end, 0.0)
        self.alpha = check_float("alpha", self.alpha, 0.0)
        self.beta = check_float("beta", self.beta, 0.0)
        if self.capacity < self.window:
            raise ValueError(
                f"capacity must hold at least one window (burn_in + length + n_step - 1 = "
                f"{self.window} records), got capacity={self.capacity!r}."
            )

    @property
    def window(self) -> int:
        """Records per sampled window: burn-in, learning region and bootstrap."""
        return self.burn_in + self.length + self.n_step - 1


R2D2_CARTPOLE_QUICK = {
    "frames": 1024,
    "warmup_frames": 512,
    "capacity": 2048,
    "batch_size": 8,
    "eval_episodes": 2,
    "log_every": 2,
}

#: ``r2d2 --distributed --quick``: a short run (overrides of :class:`R2D2CartPoleConfig`) with
#: checked samples.
R2D2_DISTRIBUTED_QUICK = {
    "frames": 2048,
    "warmup_frames": 512,
    "capacity": 4096,
    "batch_size": 8,
    "eval_episodes": 2,
}


# ---------------------------------------------------------------------------- ppo_course
#: ``ppo_course``'s defaults of the fields declared in :class:`PPOConfig`: the run's size, then
#: learning.
PPO_COURSE_SIZE = dict(frames=491_520, num_envs=64, steps=64, eval_episodes=64)
PPO_COURSE_LEARNING = dict(lr=1e-3, gamma=0.99, max_grad_norm=0.5, epochs=4, lmbda=0.95)

#: Course seeds from here on are the evaluation's (:attr:`PPOCourseConfig.eval_seed`).
EVAL_SEED = 1 << 40


@dataclasses.dataclass(kw_only=True)
class PPOCourseConfig(PPOConfig, **PPO_COURSE_SIZE, **PPO_COURSE_LEARNING):
    """Hyperparameters of one run (defaults: the tuned run of the benchmarks page).

    The fields of :class:`~torchrl_ext.examples._config.PPOConfig` (``seed`` to
    ``critic_coeff``; env ``i`` starts on course seed ``seed + i``, ``hidden`` is the width of
    the two hidden layers of actor and critic, ``lr`` and ``clip`` decay linearly to zero over
    ``frames``, ``eval_episodes`` counts unseen courses) with this pipeline's defaults, then:

    Args:
        minibatch_size (int): transitions per minibatch.
        init_scale (float): initial standard deviation of the action distribution.
        max_steps (int): step limit of an episode (a truncation, then a new course).
        return_window (int): fresh-course episodes averaged into the curve.

    Examples:
        >>> cfg = PPOCourseConfig(seed=1, num_envs=8, steps=16, frames=1024)
        >>> cfg.frames_per_batch
        128
        >>> PPOCourseConfig(frames=10)
        Traceback (most recent call last):
        ...
        ValueError: frames must be at least one batch (num_envs * steps = 4096), got frames=10.
    """

    minibatch_size: int = 1024
    init_scale: float = 0.6
    max_steps: int = 300
    return_window: int = 100

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check_ints("minibatch_size", "max_steps", "return_window")
        if not self.init_scale > 0:
            raise ValueError(f"init_scale must be > 0, got init_scale={self.init_scale!r}.")

    @property
    def eval_seed(self) -> int:
        """Course seed of the first evaluation env: ``EVAL_SEED + seed * eval_episodes``.

        Eval env ``i`` starts on course seed ``eval_seed + i``: courses the training envs do not
        start on, disjoint between runs of different seeds.
        """
        return EVAL_SEED + self.seed * self.eval_episodes


PPO_COURSE_QUICK = {
    "num_envs": 16,
    "steps": 32,
    "epochs": 2,
    "minibatch_size": 256,
    "eval_episodes": 4,
    "max_steps": 100,
}


# ---------------------------------------------------------------------------- mappo_signalling
#: ``mappo_signalling``'s defaults of the fields declared in :class:`PPOConfig`: the run's size,
#: learning, the loss weights.
MAPPO_SIGNALLING_SIZE = dict(frames=1_000_000, num_envs=64, steps=16, eval_episodes=1024)
MAPPO_SIGNALLING_LEARNING = dict(lr=3e-3, gamma=0.99, max_grad_norm=1.0, epochs=4, lmbda=0.95)
MAPPO_SIGNALLING_WEIGHTS = dict(entropy_coeff=0.05, critic_coeff=1.0)


@dataclasses.dataclass(kw_only=True)
class MAPPOSignallingConfig(
    PPOConfig, **MAPPO_SIGNALLING_SIZE, **MAPPO_SIGNALLING_LEARNING, **MAPPO_SIGNALLING_WEIGHTS
):
    """Hyperparameters of one run.

    The fields of :class:`~torchrl_ext.examples._config.PPOConfig` (``seed`` to
    ``critic_coeff``; ``hidden`` is the LSTM's, or the first MLP layer's, width, learning rate
    and clip range stay constant, the gradient is clipped per agent group) with this pipeline's
    defaults, then:

    Args:
        listener (str): ``"lstm"`` (a listener with memory) or ``"mlp"`` (feed-forward).
        vocab (int): ``V``, targets and tokens.
        delay (int): steps between the showing of the token and the answer.
        envs_per_minibatch (int): env rows per minibatch.
        target_success (float): the success rate that counts as solved.
        success_window (int): episodes the success rate is measured over.
    """

    listener: PolicyKind = "lstm"
    vocab: int = 8
    delay: int = 2
    envs_per_minibatch: int = 16
    target_success: float = 0.95
    success_window: int = 1024

    def __post_init__(self) -> None:
        if self.listener not in ("lstm", "mlp"):
            raise ValueError(f"listener must be 'lstm' or 'mlp', got listener={self.listener!r}.")
        super().__post_init__()
        self.check_ints("envs_per_minibatch", "success_window")
        # the env's own bounds (SignallingEnv checks them again)
        self.vocab = check_int("vocab", self.vocab, minimum=2, maximum=2**20)
        self.delay = check_int("delay", self.delay, minimum=0, maximum=2**20)
        self.target_success = check_float("target_success", self.target_success, 0.0, 1.0)


MAPPO_SIGNALLING_QUICK = {
    "num_envs": 16,
    "steps": 8,
    "epochs": 2,
    "envs_per_minibatch": 8,
    "eval_episodes": 64,
}
