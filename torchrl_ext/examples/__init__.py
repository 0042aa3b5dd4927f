"""Example pipelines, run through one entry point: ``python -m torchrl_ext.examples``.

* ``ppo`` (:mod:`~torchrl_ext.examples.ppo_cartpole`): recurrent PPO on partially observable
  CartPole.
* ``r2d2`` (:mod:`~torchrl_ext.examples.r2d2_cartpole`): R2D2 on the same task, from TorchRL
  blocks, :class:`~torchrl_ext.data.Sequence` replay and :class:`~torchrl_ext.objectives.R2D2Loss`.
* ``course`` (:mod:`~torchrl_ext.examples.ppo_course`): PPO driving procedurally generated courses.
* ``results`` (:mod:`~torchrl_ext.examples.results`): the main demo's table and curves.

Every command writes under ``runs/`` unless ``--out`` says otherwise, logs through
:mod:`torchrl.record.loggers`, checkpoints every ``--save-every`` frames and continues a saved run
with ``--resume DIR``. What the pipelines share lives in private modules: run folders and
checkpoints in ``_run_folder``, logs in ``_run_logs``, signals in ``_run_signals`` (both reached
through ``_run_folder``), the shared ``Config`` fields in ``_config``, training pieces in
``_common`` and the PPO pieces in ``_ppo``. Each pipeline's ``Config`` (``ppo_cartpole.Config``)
is defined in the torch-free ``_configs`` or ``_popgym_configs``, so that the command line makes
a new run's config (``_command_configs``), and refuses a bad one, before it imports the pipeline.

:func:`load_policy` returns the policy trained in a run folder (``runs/ppo/seed0``) as a
TensorDict module, read from its checkpoint as data only (``weights_only=True``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["load_policy"]


def __getattr__(name: str) -> Any:
    # imported on use, so that ``python -m torchrl_ext.examples --help`` stays light
    if name == "load_policy":
        from torchrl_ext.examples._policy import load_policy

        return load_policy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
