"""The PPO demo's anchors: the same recurrent PPO written without torchrl_ext.

* :mod:`.cartpole_adapter`: our ``CartPoleEnv(observe_velocity=False)`` as a plain batched torch
  env with auto-reset (what a hand-written loop and a gymnasium-style VecEnv step).
* :mod:`.cleanrl_lstm_ppo`: a CleanRL-style LSTM PPO in one file, plain torch.
* :mod:`.sb3_recurrent_ppo`: sb3-contrib's ``RecurrentPPO`` on a VecEnv adapter of the same env
  (optional: needs the ``compare`` extra).

``benchmarks/ppo_side_by_side.py`` runs them next to ``python examples/ppo_cartpole.py``.
"""
