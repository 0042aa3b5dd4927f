"""Example pipelines, run through one entry point: ``python -m torchrl_ext.examples``.

* ``ppo`` (:mod:`~torchrl_ext.examples.ppo_cartpole`): recurrent PPO on partially observable
  CartPole.
* ``r2d2`` (:mod:`~torchrl_ext.examples.r2d2_cartpole`): R2D2 on the same task, from TorchRL
  blocks, :class:`~torchrl_ext.data.Sequence` replay and :class:`~torchrl_ext.objectives.R2D2Loss`.
* ``course`` (:mod:`~torchrl_ext.examples.ppo_course`): PPO driving procedurally generated courses.
* ``results`` (:mod:`~torchrl_ext.examples.results`): the main demo's table and curves.

Every command writes under ``runs/`` unless ``--out`` says otherwise, logs through
:mod:`torchrl.record.loggers`, checkpoints every ``--save-every`` frames and continues a saved run
with ``--resume DIR``. What the pipelines share lives in :mod:`torchrl_ext.examples._common`.
"""
