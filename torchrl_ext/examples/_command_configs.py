"""The config of every new run a command line asks for, made as its pipeline will make it.

The command line (``__main__``) makes them after parsing and before it imports the pipeline, so
that a config the pipeline would refuse (``ppo --frames 100``, ``popgym num_envs=0``) is one
argparse line at once, not an error after torch, TorchRL and Warp have loaded. Each pipeline's
``main`` still checks its configs (they are called from Python too); :func:`new_runs` follows
those ``main`` functions: which ``Config``, which ``--quick`` overrides, which fields the
command's own options set. A resumed run keeps the config of its checkpoint and is not made
here. Torch-free.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from torchrl_ext.examples import _configs, _popgym_configs
from torchrl_ext.examples._config import config_of
from torchrl_ext.examples._run_folder import latest_checkpoint

__all__ = ["NewRuns", "new_runs"]


@dataclasses.dataclass(frozen=True)
class NewRuns:
    """New runs of one pipeline, one per seed, and how the pipeline makes their config.

    Args:
        pipeline (str): the runs' folder under ``runs/`` (``popgym/HigherLower-easy``), which
            starts the message of a refused config, as in the pipeline's own.
        config (callable): the pipeline's ``Config`` class.
        quick (dict): the overrides the pipeline's ``--quick`` applies.
        seeds (list of int): the runs' seeds.
        fields (dict, optional): the config fields the command's own options set
            (``--policy``, ``--env``). Defaults to none.

    Examples:
        >>> from argparse import Namespace
        >>> args = Namespace(quick=False, frames=100, overrides=[])
        >>> runs = NewRuns("ppo", _configs.PPOCartPoleConfig, {}, [0])
        >>> runs.configs(args)
        Traceback (most recent call last):
        ...
        ValueError: frames must be at least one batch (num_envs * steps = 512), got frames=100.
    """

    pipeline: str
    config: Callable[..., Any]
    quick: dict[str, Any]
    seeds: list[int]
    fields: dict[str, Any] = dataclasses.field(default_factory=dict)

    def configs(self, args: Any) -> list[Any]:
        """Each run's config (:func:`~torchrl_ext.examples._config.config_of`).

        Raises:
            TypeError: for an override of the wrong type (the config's own checks).
            ValueError: for an unknown or malformed override, or a value the config refuses.
        """
        return [
            config_of(args, self.config, self.quick, seed=seed, **self.fields)
            for seed in self.seeds
        ]


def new_runs(args: Any) -> list[NewRuns]:
    """The new runs of a parsed training command line (none with ``--resume``).

    Examples:
        >>> from torchrl_ext.examples.__main__ import make_parser
        >>> args = make_parser().parse_args(["results", "--seeds", "0", "1", "--mlp-seeds", "3"])
        >>> args.pipeline = "results"
        >>> [(runs.seeds, runs.fields) for runs in new_runs(args)]
        [([0, 1], {'policy': 'lstm'}), ([3], {'policy': 'mlp'})]
    """
    if args.resume is not None:
        return []
    if args.command == "results":  # results.run_all: ppo_cartpole's config per seed and policy
        config, quick = _configs.PPOCartPoleConfig, _configs.PPO_CARTPOLE_QUICK
        return [
            NewRuns(args.pipeline, config, quick, args.seeds, {"policy": "lstm"}),
            NewRuns(args.pipeline, config, quick, args.mlp_seeds, {"policy": "mlp"}),
        ]
    if args.command == "popgym-results":
        return list(_table_runs(args))
    return [_one_pipeline(args)]


def _one_pipeline(args: Any) -> NewRuns:
    """The runs of a command that trains one pipeline on ``--seeds`` (see each ``main``)."""
    command, seeds = args.command, args.seeds
    if command == "ppo":
        config, quick = _configs.PPOCartPoleConfig, _configs.PPO_CARTPOLE_QUICK
        return NewRuns(args.pipeline, config, quick, seeds, {"policy": args.policy})
    if command == "r2d2":
        distributed = _configs.R2D2_DISTRIBUTED_QUICK
        quick = distributed if args.distributed else _configs.R2D2_CARTPOLE_QUICK
        return NewRuns(args.pipeline, _configs.R2D2CartPoleConfig, quick, seeds)
    if command == "course":
        return NewRuns(args.pipeline, _configs.PPOCourseConfig, _configs.PPO_COURSE_QUICK, seeds)
    if command == "signalling":
        config, quick = _configs.MAPPOSignallingConfig, _configs.MAPPO_SIGNALLING_QUICK
        return NewRuns(args.pipeline, config, quick, seeds, {"listener": args.listener})
    if command == "popgym":
        fields = {"env": args.env, "difficulty": args.difficulty}
        if args.algo == "r2d2":
            config, quick = _popgym_configs.R2D2PopGymConfig, _popgym_configs.R2D2_POPGYM_QUICK
        else:
            config = _popgym_configs.config_class(args.env)
            quick = _popgym_configs.PPO_POPGYM_QUICK
        return NewRuns(args.pipeline, config, quick, seeds, fields)
    raise ValueError(f"{command} is not a command that trains one pipeline.")


def _table_runs(args: Any) -> Iterator[NewRuns]:
    """``popgym-results``: per row, the seeds whose folder holds no run yet.

    The others are resumed, or read back when finished, as ``popgym_results.train_row`` does.
    """
    out = _popgym_configs.table_folder(args)
    for env, difficulty in _popgym_configs.table_rows(args):
        seeds = [
            seed
            for seed in args.seeds
            if latest_checkpoint(_popgym_configs.seed_folder(out, env, difficulty, seed)) is None
        ]
        config, quick = _popgym_configs.config_class(env), _popgym_configs.PPO_POPGYM_QUICK
        fields = {"env": env, "difficulty": difficulty}
        yield NewRuns(f"popgym/{env}-{difficulty}", config, quick, seeds, fields)
