"""The trained policy of a run folder, rebuilt from its checkpoint: :func:`load_policy`."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from tensordict.nn import TensorDictModuleBase, TensorDictSequential

from torchrl_ext.examples import _checkpointing, _run_folder

__all__ = ["load_policy"]


def pipeline_of(config: dict[str, Any]) -> ModuleType:
    """The example module whose ``Config`` has the fields of a saved ``config``."""
    if "envs_per_minibatch" in config and "policy" in config:
        from torchrl_ext.examples import ppo_cartpole as pipeline
    elif "max_steps" in config:
        from torchrl_ext.examples import ppo_course as pipeline
    elif "n_step" in config:
        from torchrl_ext.examples import r2d2_cartpole as pipeline
    else:
        raise ValueError("the checkpoint holds no ppo, course or r2d2 run.")
    return pipeline


def load_policy(run: str | Path, device: str | torch.device = "cpu") -> TensorDictModuleBase:
    """The policy trained in a run folder of ``ppo``, ``course`` or ``r2d2``.

    The run's latest checkpoint is checked against its manifest and read with
    ``weights_only=True``; the networks are rebuilt from its config and loaded. The policy reads
    ``observation`` (and, if recurrent, the states the env's primers add) and writes
    ``action``: PPO's actor samples unless run under
    ``set_exploration_type(ExplorationType.DETERMINISTIC)``; R2D2's acts greedily.

    Args:
        run (str or Path): the run folder, e.g. ``runs/ppo/seed0``.
        device (str or torch.device, optional): where the networks go. Defaults to ``"cpu"``.

    Returns:
        The policy, a TensorDict module in eval mode.

    Raises:
        SystemExit: if the folder holds no checkpoint.
        ValueError: if the checkpoint is damaged or is not of one of those pipelines.
    """
    state = _run_folder.load_checkpoint(_run_folder.find_checkpoint(run))
    return build_policy(state, torch.device(device))[0]


def build_policy(state: dict[str, Any], device: torch.device) -> tuple[Any, Any, ModuleType]:
    """The loaded policy of a checkpoint's ``state``, its config and its pipeline module."""
    pipeline = pipeline_of(state["config"])
    cfg = pipeline.Config(**state["config"])
    if pipeline.__name__.endswith("r2d2_cartpole"):
        from torchrl.modules import QValueModule

        qnet = pipeline.make_qnet(cfg).to(device)
        loss = pipeline.make_loss(cfg, qnet)
        policy = TensorDictSequential(qnet, QValueModule(action_space="categorical"))
    else:
        obs_dim = 2  # CartPole without velocities; a course's depends on its config
        if pipeline.__name__.endswith("ppo_course"):
            obs_dim = pipeline.make_env(cfg, 1, 0, device).observation_spec["observation"].shape[-1]
        actor, critic = pipeline.make_agent(cfg, obs_dim)
        loss = pipeline.make_loss(cfg, actor.to(device), critic.to(device))
        policy = actor
    _checkpointing.load_loss(loss, state["loss"])
    return policy.eval(), cfg, pipeline
