"""
Learning to drive courses it has never seen: PPO on CourseEnv
=============================================================

:class:`~torchrl_ext.envs.CourseEnv` hands each env a new procedurally generated course whenever an
episode finishes (lap done, step limit, or an unusable course), and respawns the car on the same
course after a crash. So the return of an episode that starts right after a regeneration measures
how well the policy drives a course it has *never seen*. This tutorial trains a feed-forward PPO
agent (stock TorchRL ``Collector`` and ``ClipPPOLoss``, our
:class:`~torchrl_ext.objectives.RecurrentGAE` with a feed-forward critic) and shows that this
return rises.

The pieces come from ``examples/ppo_course.py`` in the repository (the examples live beside the
package, not in the wheel); the full run is ``python examples/ppo_course.py`` (see the benchmarks
page). Set ``TORCHRL_EXT_FAST=1`` to shrink the run (the documentation build does).
"""

# %%
# Setup
# -----
# Warp kernels are compiled on first use and cached, so the first run of this script is slower.
import logging
import os
import sys
import time
from pathlib import Path

import matplotlib.pyplot as plt
import torch
import warp as wp
from torchrl.collectors import Collector

# examples/ppo_course.py, from the repository root or from tutorials/ (where the docs run it)
sys.path.insert(0, str(next(p for p in (Path("examples"), Path("../examples")) if p.is_dir())))
import ppo_course

wp.config.log_level = wp.LOG_WARNING
logging.getLogger("torchrl").setLevel(logging.WARNING)
torch.set_num_threads(1)
torch.manual_seed(0)
FAST = os.environ.get("TORCHRL_EXT_FAST") == "1"
NUM_ENVS = 32 if FAST else 64
BATCHES = 30 if FAST else 40
cfg = ppo_course.Args(
    seed=0,
    num_envs=NUM_ENVS,
    steps=64,
    frames=NUM_ENVS * 64 * BATCHES,
    minibatch_size=512,
    return_window=50,
    eval_episodes=32,
)

# %%
# The env and the agent
# ---------------------
# ``make_env`` wraps ``CourseEnv(num_envs, seed=seed, max_steps=300)`` with ``InitTracker``,
# ``StepCounter`` and a fixed ``ObservationNorm``: range readings and speed divided by their
# maxima, the checkpoint distance by the checkpoint spacing. The actor is an MLP giving the mean of
# a Gaussian over ``(steer, throttle)`` with a learned state-independent scale (the env clips
# samples to ``[-1, 1]``); the critic is an MLP. ``make_loss`` installs ``RecurrentGAE`` into
# ``ClipPPOLoss`` with ``loss.make_value_estimator`` (plain attribute assignment would be ignored).
env = ppo_course.make_env(cfg, cfg.num_envs, cfg.seed)
obs_dim = env.observation_spec["observation"].shape[-1]
actor, critic = ppo_course.make_agent(cfg)
loss = ppo_course.make_loss(cfg, actor, critic)
optim = ppo_course.make_optimizer(cfg, loss)
print("observation", obs_dim, "action", tuple(env.action_spec.shape))

# %%
# Which episodes are on a fresh course?
# -------------------------------------
# ``EpisodeTracker`` sums each env's reward and checkpoints
# across batches. When an episode ends it decides from the step results whether the next one is on a
# new course: a crash alone (``out_of_bounds``, lap not done, not truncated, course valid) means a
# respawn on the same course; anything else means a regeneration. The first episode of every env is
# fresh too. Episodes that ended on an invalid course (``valid`` False: reward 0, observations
# zeroed by the env, never NaN) are not counted.
tracker = ppo_course.EpisodeTracker(cfg.num_envs)

# %%
# Training
# --------
# Each batch: collect ``[num_envs, 64]`` steps, compute GAE, check the batch (shapes, finite values,
# zero observations on invalid courses, ``is_init`` one step after ``done``), record the completed
# episodes, then four PPO epochs over shuffled minibatches.
collector = Collector(env, actor, frames_per_batch=cfg.num_envs * 64, total_frames=cfg.frames)
generator = torch.Generator().manual_seed(cfg.seed)
per_batch, window = [], []
frames, start = 0, time.perf_counter()
for batch in collector:
    loss.value_estimator(batch)
    ppo_course.check_batch(cfg, batch, first=frames == 0)
    fresh = [e for e in tracker.update(batch) if e["fresh"]]
    window = (window + fresh)[-cfg.return_window :]
    ppo_course.anneal(cfg, loss, optim, frames)
    frames += batch.numel()
    ppo_course.update(cfg, batch, loss, optim, generator)
    per_batch.append((frames, ppo_course.window_means(window)))
collector.shutdown()
print(f"{frames} frames in {time.perf_counter() - start:.1f} s")
for frames_at, means in per_batch[:: max(1, len(per_batch) // 6)] + per_batch[-1:]:
    print(
        f"frames {frames_at:6d}: return {means['return']:6.2f}  "
        f"checkpoints {means['checkpoints']:5.2f}  laps finished {100 * means['finished']:3.0f} %"
    )

# %%
# The curve
# ---------
# Mean return and checkpoints passed over the last 50 episodes that started on a freshly generated
# course. A random policy crashes almost at once (a negative return); the trained one drives the
# whole lap of a course it has never seen.


x = [f for f, _ in per_batch]
fig, ax = plt.subplots(figsize=(6, 3.4))
ax.plot(x, [m["return"] for _, m in per_batch], label="return per episode")
ax.plot(x, [m["checkpoints"] for _, m in per_batch], label="checkpoints per episode")
ax.set_xlabel("frames")
ax.set_ylabel("mean over fresh-course episodes")
ax.legend(loc="upper left", fontsize=8)
fig.tight_layout()
plt.show()

# %%
# Unseen courses, deterministic policy
# ------------------------------------
# ``evaluate`` drives one episode with the policy's mean action on each of 32 courses from a seed
# the training envs never started on.
evaluation = ppo_course.evaluate(cfg, actor)
print({k: round(v, 2) for k, v in evaluation.items()})
