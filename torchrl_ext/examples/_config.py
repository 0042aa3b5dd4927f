"""The fields every pipeline's ``Config`` shares, and how a run's config is made or resumed.

* :class:`TrainConfig` and :class:`PPOConfig` declare, document and check the fields every
  pipeline (every PPO pipeline) has. A pipeline's ``Config`` subclasses one of them, gives the
  inherited fields its own defaults as class keywords (``class Config(PPOConfig, lr=3e-4)``)
  and declares only its own fields.
* :func:`config_of`: a new run's config from the command line (``--quick``, ``KEY=VALUE``
  overrides, ``--frames``); :func:`resumed_config`: a resumed run's, from its checkpoint.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from torchrl_ext._checks import check_float, check_int
from torchrl_ext.examples._overrides import parse_overrides
from torchrl_ext.examples._run_folder import (
    RunOptions,
    find_checkpoint,
    load_checkpoint,
    write_json,
)

#: Batches a ``--quick`` run collects.
QUICK_BATCHES = 3

T = TypeVar("T")


@dataclasses.dataclass(kw_only=True)
class TrainConfig:
    """What every pipeline's ``Config`` has; the pipeline's dataclass adds its own fields.

    Fields are keyword-only. A subclass gives inherited fields its defaults as class keywords
    (``class Config(TrainConfig, frames=1024, lr=1e-3)``) instead of declaring them again; the
    checks run in ``__post_init__``, which a subclass with more checks extends.

    Args:
        seed (int, optional): seed of the envs, the network initialization and the pipeline's
            own generator (minibatch order or replay sampling). Defaults to 0.
        frames (int): frames collected in total; the pipeline's schedules (learning rate, clip
            range, exploration) run over them.
        num_envs (int): parallel envs.
        steps (int): steps per env per collected batch (the row length).
        hidden (int, optional): width of the networks' hidden layers (the LSTM's hidden size).
            Defaults to 64.
        lr (float): Adam learning rate (its initial value where it is scheduled).
        gamma (float): discount.
        max_grad_norm (float): gradient-norm clip, applied per parameter group (per network).
        eval_episodes (int): episodes of the final deterministic (greedy) evaluation.

    Raises:
        TypeError: at class creation, for a class keyword that names no inherited field or a
            field the subclass declares itself.

    Examples:
        >>> cfg = TrainConfig(frames=64, num_envs=4, steps=8, lr=1e-3, gamma=0.99,
        ...                   max_grad_norm=0.5, eval_episodes=4)
        >>> cfg.frames_per_batch, cfg.seed, cfg.hidden, cfg.eval_seed
        (32, 0, 64, 1000003)
        >>> dataclasses.replace(cfg, frames=16)
        Traceback (most recent call last):
        ...
        ValueError: frames must be at least one batch (num_envs * steps = 32), got frames=16.
        >>> @dataclasses.dataclass(kw_only=True)
        ... class Small(TrainConfig, frames=64, num_envs=4, steps=8, lr=1e-3, gamma=0.9):
        ...     max_grad_norm: float = 1.0
        ...     eval_episodes: int = 2
        >>> Small().frames_per_batch, Small(lr=0.1).lr
        (32, 0.1)
    """

    seed: int = 0
    frames: int
    num_envs: int
    steps: int
    hidden: int = 64
    lr: float
    gamma: float
    max_grad_norm: float
    eval_episodes: int

    def __init_subclass__(cls, **defaults: Any) -> None:
        super().__init_subclass__()
        inherited = {f.name: f for f in dataclasses.fields(cls)} if defaults else {}
        own = inspect.get_annotations(cls)
        for name in defaults:
            if name not in inherited or name in own:
                raise TypeError(
                    f"{cls.__name__}: class keyword {name}= must name a field inherited from "
                    f"{cls.__mro__[1].__name__} that the class does not declare itself."
                )
        # declared again with the inherited type and the new default, before the class's own
        cls.__annotations__ = {**{name: inherited[name].type for name in defaults}, **own}
        for name, value in defaults.items():
            setattr(cls, name, value)

    def __post_init__(self) -> None:
        self.check_ints("frames", "num_envs", "steps", "hidden", "eval_episodes")
        self.seed = check_int("seed", self.seed, minimum=0)
        self.lr = check_float("lr", self.lr, 0.0, open_minimum=True)
        self.gamma = check_float("gamma", self.gamma, 0.0, 1.0)
        self.max_grad_norm = check_float(
            "max_grad_norm", self.max_grad_norm, 0.0, open_minimum=True
        )
        if self.frames < self.frames_per_batch:
            raise ValueError(
                f"frames must be at least one batch (num_envs * steps = {self.frames_per_batch}),"
                f" got frames={self.frames!r}."
            )

    @property
    def frames_per_batch(self) -> int:
        """Frames in one collected batch: ``num_envs * steps``."""
        return self.num_envs * self.steps

    @property
    def eval_seed(self) -> int:
        """Seed of the final evaluation's envs: ``seed + 1_000_003``, not a training seed."""
        return self.seed + 1_000_003

    def check_ints(self, *names: str) -> None:
        """Checks that the named fields are ints >= 1 (TypeError, ValueError otherwise)."""
        for name in names:
            setattr(self, name, check_int(name, getattr(self, name), minimum=1))


@dataclasses.dataclass(kw_only=True)
class PPOConfig(TrainConfig):
    """:class:`TrainConfig` and what a PPO pipeline adds: epochs, clip range, GAE, loss weights.

    Args:
        epochs (int): passes over each batch.
        clip (float, optional): PPO clip range (its initial value where it is annealed).
            Defaults to 0.2.
        lmbda (float): GAE lambda.
        entropy_coeff (float, optional): entropy bonus weight. Defaults to 0.0.
        critic_coeff (float, optional): value-loss weight. Defaults to 0.5.

    Examples:
        >>> cfg = PPOConfig(frames=64, num_envs=4, steps=8, lr=1e-3, gamma=0.99,
        ...                 max_grad_norm=0.5, eval_episodes=4, epochs=2, lmbda=0.95)
        >>> cfg.clip, cfg.critic_coeff
        (0.2, 0.5)
    """

    epochs: int
    clip: float = 0.2
    lmbda: float
    entropy_coeff: float = 0.0
    critic_coeff: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check_ints("epochs")
        self.clip = check_float("clip", self.clip, 0.0, open_minimum=True)
        self.lmbda = check_float("lmbda", self.lmbda, 0.0, 1.0)
        self.entropy_coeff = check_float("entropy_coeff", self.entropy_coeff, 0.0)
        self.critic_coeff = check_float("critic_coeff", self.critic_coeff, 0.0)


def config_of(args: Any, config: Callable[..., T], quick: dict[str, Any], **fields: Any) -> T:
    """A run's ``config(**fields)`` with the command line's ``--quick``, overrides and ``--frames``.

    ``--quick`` applies the ``quick`` overrides, then the command line's ``KEY=VALUE`` ones
    (:func:`~torchrl_ext.examples._overrides.parse_overrides`) apply; unless they set
    ``frames``, ``--quick`` collects :data:`QUICK_BATCHES` batches; ``--frames`` sets the frame
    budget.

    Examples:
        >>> from argparse import Namespace
        >>> from functools import partial
        >>> config = partial(TrainConfig, frames=1000, num_envs=8, steps=16, lr=1e-3,
        ...                  gamma=0.99, max_grad_norm=0.5, eval_episodes=4)
        >>> cfg = config_of(Namespace(quick=True, frames=None), config, {"steps": 4}, seed=2)
        >>> cfg.seed, cfg.frames, cfg.steps
        (2, 96, 4)
    """
    overrides = dict(quick) if args.quick else {}
    overrides.update(parse_overrides(config, getattr(args, "overrides", None) or []))
    if args.quick and "frames" not in overrides:
        overrides["frames"] = QUICK_BATCHES * config(**{**fields, **overrides}).frames_per_batch
    if args.frames is not None:
        overrides["frames"] = args.frames
    return config(**{**fields, **overrides})


def resumed_config(args: Any, run: RunOptions, config: Callable[..., T]) -> T | None:
    """The config a resumed run continues with; ``None`` (and a line saying so) if finished.

    The checkpoint's config, with ``--frames`` as the new budget if given: a finished run
    (trained and evaluated) continues only with more frames than it has.
    """
    state = load_checkpoint(find_checkpoint(run.out))
    cfg, counters = config(**state["config"]), state["counters"]
    done, finished = counters["frames"], counters.get("evaluated", False)
    if args.frames is not None and args.frames < done:
        raise SystemExit(f"--frames {args.frames}: {run.out} has {done:,} frames already.")
    if finished and (args.frames is None or args.frames == done):
        print(
            f"{run.out} is finished ({done:,} frames); pass --frames N with N > {done:,} "
            "to continue it.",
            flush=True,
        )
        return None
    if args.frames is None:
        return cfg
    cfg = dataclasses.replace(cfg, frames=args.frames)
    write_json(run.config_file, dataclasses.asdict(cfg))
    return cfg
