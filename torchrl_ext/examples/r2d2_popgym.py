"""R2D2 on POPGym's memory tasks with a single discrete action.

Run it with ``python -m torchrl_ext.examples popgym --algo r2d2 --env RepeatPrevious
[--difficulty easy] [--seeds 0 1 2] [--frames N] [KEY=VALUE ...]``.

The training loop is the one of :mod:`~torchrl_ext.examples.r2d2_cartpole`: an LSTM
Q-network acting with a per-env exploration rate, prioritized
:class:`~torchrl_ext.data.Sequence` replay of burn-in, learning and bootstrap windows from the
stored LSTM states, and :class:`~torchrl_ext.objectives.R2D2Loss`. This module supplies the
POPGym port and a Q-network that one-hot encodes discrete observations
(:class:`~torchrl_ext.examples._popgym.ObservationEncoder`). Envs whose action is
multi-discrete (MineSweeper, Battleship) or continuous (the pendulums) are for
``--algo ppo``: a Q-network scores one discrete action.

As in the PPO pipeline, the logged ``best_mean_return`` over a 100-episode window is POPGym's
MMER.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.data import Categorical, MultiCategorical
from torchrl.envs import Compose, TransformedEnv

from torchrl_ext.examples import _common, _popgym, _popgym_configs, r2d2_cartpole
from torchrl_ext.examples.r2d2_cartpole import STORED, Result, Task, make_lstm

# The run's config, its defaults and its --quick overrides live in the torch-free
# _popgym_configs, so that the command line builds the config, and refuses a bad one, before
# importing this module.
Config = _popgym_configs.R2D2PopGymConfig
SIZE, LEARNING = _popgym_configs.R2D2_POPGYM_SIZE, _popgym_configs.R2D2_POPGYM_LEARNING
QUICK = _popgym_configs.R2D2_POPGYM_QUICK


def make_env(cfg: Config, num_envs: int, seed: int, device: torch.device) -> TransformedEnv:
    """The port with reset flags, episode returns and the Q-network's LSTM state primer."""
    base = _popgym.make_base_env(cfg, num_envs, seed, device)
    primer = make_lstm(cfg).make_tensordict_primer()
    return TransformedEnv(base, Compose(*_popgym.make_transforms(cfg), primer).to(device))


def make_qnet(cfg: Config) -> TensorDictSequential:
    """Encoder and embedding, LSTM, and a two-layer head writing one value per action."""
    action = _popgym.task_specs(cfg)[1]
    if not isinstance(action, Categorical) or isinstance(action, MultiCategorical):
        raise TypeError(f"R2D2 needs a Categorical action spec, got {type(action).__name__}.")
    inputs, features = _popgym.input_module(cfg)
    embed = nn.Sequential(nn.Linear(features, cfg.hidden), nn.ReLU())
    lstm = make_lstm(cfg)
    _popgym.set_forget_bias(lstm.lstm, cfg.forget_bias)
    head = nn.Sequential(
        nn.Linear(cfg.hidden, cfg.hidden), nn.ReLU(), nn.Linear(cfg.hidden, action.n)
    )
    return TensorDictSequential(
        inputs,
        TensorDictModule(embed, in_keys=["features"], out_keys=["embed"]),
        lstm,
        TensorDictModule(head, in_keys=["memory"], out_keys=["action_value"]),
    )


def train(cfg: Config, run: Any, *, quick: bool = False) -> Result:
    """Trains, evaluates and logs one run (see :func:`r2d2_cartpole.train`)."""
    stored = (*STORED, "prev_action", ("next", "prev_action")) if cfg.previous_action else STORED
    return r2d2_cartpole.train(cfg, run, quick=quick, task=Task(make_env, make_qnet, stored))


def summary(result: Result) -> str:
    """The run's MMER, its greedy evaluation and its time."""
    cfg = result.config
    return (
        f"popgym r2d2 {cfg.env} {cfg.difficulty} seed {cfg.seed}: MMER "
        f"{result.best_return:.3f}; greedy evaluation {result.final_eval:.3f} over "
        f"{cfg.eval_episodes} episodes; {result.frames:,} frames in {result.seconds:.1f} s; "
        f"log: {result.out}"
    )


def main(args: argparse.Namespace) -> list[Result]:
    """Runs ``python -m torchrl_ext.examples popgym --algo r2d2`` (see ``--help``)."""
    fields = {"env": args.env, "difficulty": args.difficulty}
    return _common.train_seeds(args, args.pipeline, train, summary, Config, QUICK, **fields)
