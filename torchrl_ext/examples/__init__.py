"""End-to-end pipelines behind the README's main command.

* :mod:`torchrl_ext.examples.ppo_cartpole`: recurrent PPO on partially observable CartPole
  (``python -m torchrl_ext.examples.ppo_cartpole``).
* :mod:`torchrl_ext.examples.ppo_cartpole_results`: the per-seed results table and curves
  (``python -m torchrl_ext.examples.ppo_cartpole_results``).
* :mod:`torchrl_ext.examples.r2d2_cartpole`: R2D2-style recurrent Q-learning on sequence
  windows (``python -m torchrl_ext.examples.r2d2_cartpole``).
* :mod:`torchrl_ext.examples.ppo_course`: feed-forward PPO driving procedurally generated
  courses (``python -m torchrl_ext.examples.ppo_course``).
"""
