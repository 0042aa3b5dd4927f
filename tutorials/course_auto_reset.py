"""
New courses per env inside the step: CourseEnv's masks, validity and captured loop
==================================================================================

:class:`~torchrl_ext.envs.CourseEnv` gives every env its own procedurally generated closed course.
When an episode finishes, the env gets a *new* course; when the car crashes, it respawns on the
*same* one; every other env is untouched, bit for bit. This tutorial shows the two masks behind
that (``regenerate`` and ``respawn``), how an unusable course is gated on ``valid``, a host loop
through TorchRL, the same loop replayed as one recorded graph per step, gates courses driven by
the step inputs, and what a masked regeneration costs.

Set ``TORCHRL_EXT_FAST=1`` to shrink the sizes (the documentation build does).
"""

# %%
# Setup
# -----
# Warp kernels are compiled on first use and cached, so the first run of this script is slower.
import logging
import os
import statistics
import time

import matplotlib.pyplot as plt
import torch
import warp as wp
from torchrl.envs.utils import check_env_specs

from torchrl_ext.envs import CourseEnv

wp.config.log_level = wp.LOG_WARNING
logging.getLogger("torchrl").setLevel(logging.WARNING)
torch.set_num_threads(1)
FAST = os.environ.get("TORCHRL_EXT_FAST") == "1"
NUM_ENVS = 64 if FAST else 1024
STEPS = 200 if FAST else 300

# %%
# The env
# -------
# Actions are ``(steer, throttle)`` in ``[-1, 1]`` (clipped; NaN raises). The observation holds five
# range readings to the track edges, the speed, the heading error against the course and the
# distance to the next checkpoint; the step results (checkpoints passed this step, distance to the
# next, laps, out-of-bounds contact, ``valid``) are observation entries of their own.
env = CourseEnv(8, seed=0, max_steps=300)
check_env_specs(env)
td = env.reset()
print(sorted(td.keys()))
print("observation", tuple(td["observation"].shape), "generation", env.generation.tolist())

# %%
# The two masks
# -------------
# Both are stable ``[num_envs]`` int32 tensors on the env's device. The env reads them and never
# clears them, so whoever owns a mask writes **every entry** before every call (or graph replay).
#
# * ``env.regenerate(mask, advance=True)``: masked envs advance their epoch, get the course of their
#   new ``(seed, epoch)`` and restart on it (pose, progress and laps reset);
# * ``env.respawn(mask)``: masked envs restart on the course they have; nothing else changes.
#
# Unmasked envs keep their course, and everything derived from it, bit for bit; an all-zero mask is
# an exact no-op; ``env.generation`` (on device) is the epoch each course was built with.
regenerate = torch.zeros(8, dtype=torch.int32)
respawn = torch.zeros(8, dtype=torch.int32)
before = env.generator.views["centerline"].clone()
regenerate.copy_(torch.tensor([0, 1, 0, 0, 0, 0, 1, 0]))
respawn.copy_(torch.tensor([1, 0, 0, 0, 0, 0, 0, 0]))
env.regenerate(regenerate)
env.respawn(respawn)
same = (env.generator.views["centerline"] == before).flatten(1).all(1)
print("generation", env.generation.tolist())
print("course kept", same.tolist())

# %%
# The eight courses before (grey) and after the two masks. The regenerated envs 1 and 6 drive a
# new course; env 0 was only respawned and, like every other env, keeps its course bit for bit.
after = env.generator.views["centerline"]
fig, axes = plt.subplots(2, 4, figsize=(8, 4.2))
for i, ax in enumerate(axes.flat):
    for line, style in ((before[i], dict(color="0.7", lw=3)), (after[i], dict(lw=1.5))):
        closed = torch.cat([line, line[:1]]).cpu()
        ax.plot(closed[:, 0], closed[:, 1], **style)
    status = "new course" if regenerate[i] else ("respawned" if respawn[i] else "untouched")
    ax.set_title(f"env {i}: {status}", fontsize=9)
    ax.set_aspect("equal")
    ax.axis("off")
fig.tight_layout()
plt.show()

# %%
# A curriculum writes the *next-course* parameters; they apply only when an env's course is rebuilt.
env.generator.set_params([2, 3], width=3.0)
regenerate.copy_(torch.tensor([0, 0, 1, 0, 0, 0, 0, 0]))
env.regenerate(regenerate)
print("width", env.generator.views["width"].tolist())

# %%
# Gating on ``valid``
# -------------------
# A generated course can be unusable (a self-crossing or too tight a turn); it is flagged, never
# raised on, because the regeneration may run inside a graph. Its env gets reward 0 and finite
# zero observations, *selected* in the kernel (never ``reward * valid``: ``0 * nan`` is ``nan``),
# and its episode terminates so that auto-reset regenerates it. Here we break env 4's course on
# purpose with a NaN scale.
env.generator.views["param_scale"][4] = float("nan")
regenerate.copy_(torch.tensor([0, 0, 0, 0, 1, 0, 0, 0]))
env.regenerate(regenerate, advance=False)
root = env.observe()
root["action"] = torch.ones(8, 2)
step, root = env.step_and_maybe_reset(root)
print("valid", step["next", "valid"][:, 0].tolist())
print("env 4: reward", step["next", "reward"][4].item(), "obs", step["next", "observation"][4])
print("all finite:", bool(torch.isfinite(step["next", "observation"]).all()))

# %%
# The host loop
# -------------
# A hand-written controller steers toward the side with more room and against the heading error.
# :meth:`~torchrl_ext.envs.WarpEnv.step_and_maybe_reset` steps every env and applies the auto-reset
# policy in the same launch sequence: finished, timed-out and invalid episodes regenerate, crashes
# respawn. ``("next", ...)`` holds the true final observations; the returned root holds the
# observations the next step starts from.


def controller(obs: torch.Tensor) -> torch.Tensor:
    rays, heading_error = obs[:, :5], obs[:, 6]
    steer = 0.6 * (rays[:, 4] - rays[:, 0]) - heading_error
    throttle = torch.full_like(steer, 0.8)
    return torch.stack([steer, throttle], 1).clamp(-1, 1)


def run(env: CourseEnv, steps: int) -> tuple[dict, float, torch.Tensor]:
    """Drives ``steps`` steps; returns the totals, the median seconds of a step, the rewards."""
    root = env.reset()
    totals = {"checkpoints": 0, "laps": 0, "crashes": 0}
    rewards, seconds = [], []
    for _ in range(steps):
        root["action"] = controller(root["observation"])
        start = time.perf_counter()
        step, root = env.step_and_maybe_reset(root)
        seconds.append(time.perf_counter() - start)
        nxt = step["next"]
        totals["checkpoints"] += int(nxt["checkpoints_passed"].sum())
        totals["laps"] += int((nxt["laps"] * nxt["terminated"]).sum())
        totals["crashes"] += int(nxt["out_of_bounds"].sum())
        rewards.append(nxt["reward"])
    # the median leaves out the first step, which loads the kernels (and records the graph)
    return totals, statistics.median(seconds), torch.stack(rewards)


host = CourseEnv(NUM_ENVS, seed=1, max_steps=400)
totals, host_s, host_rewards = run(host, STEPS)
print(totals, f"mean generation {host.generation.float().mean():.2f}")

# %%
# The captured loop
# -----------------
# With ``capture=True`` the whole step (physics, progress events, reward and done flags, masked
# regeneration of the finished envs, respawn of the crashed ones, observations) is recorded once
# into a Warp graph and replayed afterwards. The regeneration sits under a conditional, so a step in
# which no env finished skips it. Replays are bitwise equal to eager steps:
captured = CourseEnv(NUM_ENVS, seed=1, max_steps=400, capture=True)
_, captured_s, captured_rewards = run(captured, STEPS)
print("bitwise equal:", torch.equal(host_rewards, captured_rewards))
print(f"median step: eager {host_s * 1e3:.3f} ms, captured {captured_s * 1e3:.3f} ms")

# %%
# Expect the two times to be close, at any size, on the CPU. A graph saves the launch overhead
# of the step's kernels, a few microseconds each, while a step of this env is dominated by its
# range readings (five sphere-traced rays per env) and, through TorchRL, by the TensorDicts of
# ``step_and_maybe_reset``. At the page's sizes both take a fraction of a millisecond and
# differ by the noise of the machine that runs them. With 1,024 and 16,384 envs a step takes
# 2.2 to 2.3 ms and 36 to 37 ms, captured or not (the table "Cost of a step" on
# :doc:`/concepts/course_env`). On CUDA, where each launch costs host time while the GPU
# waits, the graph is what removes it.

# %%
# The env's masks can be recorded into your own graph too: ``regenerate`` and ``respawn`` launch
# only kernels. Rewrite the masks in place between replays.
mine = CourseEnv(8, seed=2)
regen_mask = torch.zeros(8, dtype=torch.int32)
respawn_mask = torch.zeros(8, dtype=torch.int32)
with wp.ScopedCapture(device="cpu", force_module_load=False) as capture:
    mine.regenerate(regen_mask)
    mine.respawn(respawn_mask)
regen_mask[5] = 1
wp.capture_launch(capture.graph)
regen_mask.zero_()
regen_mask[[1, 5]] = 1
wp.capture_launch(capture.graph)
print("generation", mine.generation.tolist())

# %%
# Gates courses, driven by the step inputs
# ----------------------------------------
# With ``mode="gates"`` each course is a sequence of gates along the centerline: a bar of
# ``gate_width`` between two posts. The car must go through the next gate in order (1 reward
# each); touching a post (a disc of radius ``collision``) is a crash. The observation holds the
# next gate's posts in the car's frame, so a hand-written pilot steers at the gate's middle.
from torchrl_ext.envs.course import CourseParams

gates = CourseEnv(16, seed=0, mode="gates", params=CourseParams(gate_width=4.0), max_steps=200)
fig, axes = plt.subplots(1, 3, figsize=(8, 2.8))
views = gates.generator.views
for env, ax in enumerate(axes):
    line = views["centerline"][env]
    ax.plot(*torch.cat([line, line[:1]]).T, color="#bdbdbd", lw=0.8, ls="--")
    for left, right in views["posts"][env, : int(views["checkpoint_count"][env])]:
        ax.plot([left[0], right[0]], [left[1], right[1]], color="#e6550d", lw=1.2)
        ax.scatter([left[0], right[0]], [left[1], right[1]], s=6, color="black", zorder=3)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(f"env {env}: {int(views['checkpoint_count'][env])} gates", fontsize=9)
fig.tight_layout()
plt.show()


def pilot(observation: torch.Tensor) -> torch.Tensor:
    """Steer at the middle of the next gate (posts at columns 3:7, car frame), half throttle."""
    middle = (observation[:, 3:5] + observation[:, 5:7]) / 2
    steer = torch.atan2(middle[:, 1], middle[:, 0]).clamp(-1, 1)
    return torch.stack([steer, torch.full_like(steer, 0.5)], 1)


# %%
# ``gates.inputs`` holds two stable int32 arrays, ``"regen_mask"`` and ``"reset_mask"``, zeroed
# at construction and read by every step, never cleared: an env whose entry is set ends its
# episode (truncated) with a new course or respawns on its course. Here env 0 is given a new
# course every 50 steps by writing into ``regen_mask`` alone; with ``capture=True`` the same
# writes drive the recorded step graph.
root = gates.reset()
passed = torch.zeros(16, dtype=torch.int64)
for t in range(150):
    gates.inputs["regen_mask"][0] = int(t % 50 == 49)
    root["action"] = pilot(root["observation"])
    td, root = gates.step_and_maybe_reset(root)
    passed += td["next", "checkpoints_passed"].flatten()
gates.inputs["regen_mask"].zero_()
print("gates passed per env:", passed.tolist())
print("generation:", gates.generation.tolist())

# %%
# What a masked regeneration costs
# --------------------------------
# A rebuild is one kernel, one thread per env; unmasked envs return after one mask read. On the
# CPU the mask is first reduced to an any-flag and the rebuild runs under ``wp.capture_if``, so an
# all-zero mask skips it (eagerly after one host read; in a graph as a conditional op). Measured
# while this page was built, at its size:


def regeneration_ms(env: CourseEnv, k: int, rounds: int = 10) -> float:
    mask = torch.zeros(env.num_envs, dtype=torch.int32)
    gen = torch.Generator().manual_seed(k)
    times = []
    for _ in range(rounds):
        mask.zero_()
        mask[torch.randperm(env.num_envs, generator=gen)[:k]] = 1
        start = time.perf_counter()
        env.generator.regenerate(mask)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


for k in (0, 1, NUM_ENVS // 10, NUM_ENVS):
    print(f"N={NUM_ENVS} k={k:>5}: {regeneration_ms(host, k):.3f} ms")

# %%
# At sizes where the rebuilds dominate, the generator's report (``python
# benchmarks/course_report.py``, CPU, 1 torch thread, medians, a 2-core x86_64 CPU with no other
# load) gives, in milliseconds per masked regeneration of k of N envs:
#
# =====  =====  =======  ============  ========  ===============
# N      k      eager    eager uncond  captured  captured uncond
# =====  =====  =======  ============  ========  ===============
# 1024   0      0.037    0.029         0.002     0.002
# 1024   1      0.056    0.033         0.007     0.006
# 1024   102    0.452    0.412         0.379     0.377
# 1024   1024   3.864    3.747         3.624     3.623
# 16384  0      0.044    0.036         0.008     0.008
# 16384  1      0.085    0.046         0.022     0.014
# 16384  1638   6.976    6.814         6.565     6.492
# 16384  16384  56.75    56.61         56.19     56.21
# =====  =====  =======  ============  ========  ===============
#
# A rebuilt course costs about 3.5 µs on one core, so a step in which a few envs finish pays
# microseconds, and a step in which none does pays a few microseconds. A full step of
# ``CourseEnv`` is dominated by the range readings (sphere tracing, five rays per env); see
# ``python benchmarks/course_env_report.py`` and the concept page.
