"""
Writing a Warp environment for TorchRL
======================================

:class:`~torchrl_ext.envs.WarpEnv` turns a batch of simulations written as NVIDIA Warp kernels into
a TorchRL environment with correct partial resets, per-env seeding, a fused auto-reset and graph
capture. This tutorial writes a small env on it, resets some of its envs with a mask, records its
step into a graph and collects data from it with :class:`torchrl.collectors.Collector`.

Set ``TORCHRL_EXT_FAST=1`` to shrink the sizes (the documentation build does).
"""

# sphinx_gallery_thumbnail_number = 1

# %%
# Setup
# -----
# Warp kernels are compiled on first use and cached, so the first run of this script is slower.
import os
import time
from typing import Any

import matplotlib.pyplot as plt
import torch
import warp as wp
from torchrl.collectors import Collector
from torchrl.data import Bounded, Composite, Unbounded
from torchrl.envs import InitTracker, TransformedEnv
from torchrl.envs.utils import check_env_specs

from torchrl_ext.envs import CartPoleEnv, WarpEnv
from torchrl_ext.envs.warp_env import begin_episode, count_step, stream_key, uniform_range

wp.config.log_level = wp.LOG_WARNING
torch.manual_seed(0)
FAST = os.environ.get("TORCHRL_EXT_FAST") == "1"
NUM_ENVS = 64 if FAST else 1024
STEPS = 50 if FAST else 200

# %%
# The kernels
# -----------
# Our env is a point mass on a line that must be pushed back to the origin: state ``(x, v)``,
# action a force in ``[-1, 1]``, reward ``-x**2``; an episode terminates when ``|x| > 2``.
#
# Kernels are module-level functions; the Python side only allocates and launches. The base
# class passes them its buffers: the per-env step and episode counters, the seed, the reset mask
# and the output buffers. New episodes draw their start state from a counter-based stream keyed
# by ``(seed, env, episode)``: :func:`~torchrl_ext.envs.warp_env.stream_key` and
# :func:`~torchrl_ext.envs.warp_env.uniform_range` give reproducible, per-env randomness without
# any stateful generator, and :func:`~torchrl_ext.envs.warp_env.begin_episode` bumps the episode
# counter and zeroes the step counter.


@wp.func
def point_start(key: wp.uint32):
    """Start state: ``x`` uniform in ``[-1, 1)``, at rest."""
    return float(uniform_range(key, 0, wp.float64(-1.0), wp.float64(1.0))), 0.0


@wp.kernel
def point_reset(
    state: wp.array2d(dtype=float),
    mask: wp.array(dtype=wp.int32),
    seed: wp.array(dtype=wp.uint32),
    steps: wp.array(dtype=wp.int32),
    episode: wp.array(dtype=wp.int32),
    obs_root: wp.array2d(dtype=float),
):
    i = wp.tid()
    if mask[i] != 0:
        x, v = point_start(stream_key(seed, i, begin_episode(steps, episode, i)))
        state[i, 0] = x
        state[i, 1] = v
    obs_root[i, 0] = state[i, 0]
    obs_root[i, 1] = state[i, 1]


@wp.kernel
def point_step(
    state: wp.array2d(dtype=float),
    action: wp.array(dtype=float),
    seed: wp.array(dtype=wp.uint32),
    steps: wp.array(dtype=wp.int32),
    episode: wp.array(dtype=wp.int32),
    max_steps: int,
    autoreset: int,
    obs_next: wp.array2d(dtype=float),
    obs_root: wp.array2d(dtype=float),
    reward: wp.array(dtype=float),
    terminated: wp.array(dtype=wp.bool),
    truncated: wp.array(dtype=wp.bool),
    done: wp.array(dtype=wp.bool),
):
    i = wp.tid()
    v = state[i, 1] + 0.1 * wp.clamp(action[i], -1.0, 1.0)
    x = state[i, 0] + 0.1 * v
    term = wp.abs(x) > 2.0
    trunc = count_step(steps, i, max_steps)
    obs_next[i, 0] = x
    obs_next[i, 1] = v
    reward[i] = -x * x
    terminated[i] = term
    truncated[i] = trunc
    done[i] = term or trunc
    if autoreset != 0:
        # the fused auto-reset: done envs start over; the root obs is the reset one
        if term or trunc:
            x, v = point_start(stream_key(seed, i, begin_episode(steps, episode, i)))
        obs_root[i, 0] = x
        obs_root[i, 1] = v
    state[i, 0] = x
    state[i, 1] = v


# %%
# The env
# -------
# A subclass declares its specs, allocates its state and returns *launch recipes*: the kernel and
# its inputs. The base class records each recipe once (and, with ``capture=True``, records the
# whole sequence into a graph), so a step costs one launch or one graph replay.


class PointEnv(WarpEnv):
    """Point masses pushed towards the origin (tutorial env)."""

    def __init__(self, num_envs: int, seed: int | None = None, **kwargs: Any) -> None:
        super().__init__(num_envs, "cpu", seed, max_steps=100, **kwargs)

    def _make_specs(self) -> None:
        n = self.num_envs
        self.observation_spec = Composite(observation=Unbounded((n, 2)), shape=(n,))
        self.action_spec = Bounded(-1.0, 1.0, shape=(n, 1))
        self.reward_spec = Unbounded((n, 1))

    def _allocate_state(self) -> None:
        self.state = wp.zeros((self.num_envs, 2), dtype=float, device=self.warp_device)

    def _counters(self) -> list:
        b = self.buffers
        return [b["seed"], b["steps"], b["episode"]]

    def _reset_launches(self) -> list:
        b = self.buffers
        return [(point_reset, [self.state, b["mask"], *self._counters(), b["root"]["observation"]])]

    def _step_launches(self, autoreset: bool) -> list:
        b = self.buffers
        outputs = [b["next"]["observation"], b["root"]["observation"], b["reward"]]
        flags = [b["terminated"], b["truncated"], b["done"]]
        inputs = [self.state, b["action"], *self._counters(), self.step_limit, int(autoreset)]
        return [(point_step, inputs + outputs + flags)]

    def _check_action_values(self, action: torch.Tensor) -> None:
        if bool(torch.isnan(action).any()):
            raise ValueError("action must not contain NaN.")


env = PointEnv(8, seed=0)
check_env_specs(env)

# %%
# Masked resets
# -------------
# ``reset`` with a ``"_reset"`` mask resets exactly the masked envs; the others keep their state
# bit for bit. Here we push every env for a few steps, then reset envs 0 and 3 only. As everywhere
# in TorchRL, the mask travels in the tensordict that holds the current data, which keeps the
# entries of the envs that are not reset.
root = env.reset()
for _ in range(5):
    root["action"] = torch.ones(8, 1)
    _, root = env.step_and_maybe_reset(root)
before = root["observation"].clone()
mask = torch.zeros(8, 1, dtype=torch.bool)
mask[[0, 3]] = True
after = env.reset(root.set("_reset", mask))["observation"]
print("changed envs:", (after != before).any(dim=-1).nonzero().flatten().tolist())

# %%
# Auto-reset and ``is_init``
# --------------------------
# ``step_and_maybe_reset`` steps and resets the finished envs in the same kernel: the
# ``("next", "observation")`` of a done step is the true final observation, and the next root
# holds the reset observation. With :class:`~torchrl.envs.InitTracker`, ``is_init`` is True on the
# first step of every episode, terminated or truncated.
tracked = TransformedEnv(PointEnv(8, seed=1), InitTracker())
data = tracked.rollout(STEPS, break_when_any_done=False)
done = data["next", "done"][..., 0]
is_init = data["is_init"][..., 0]
print("episodes finished:", int(done.sum()))
print("is_init follows done:", bool(torch.equal(is_init[:, 1:], done[:, :-1])))

# %%
# The position of four envs over the rollout (random actions). A dot marks the last step of an
# episode; the next step starts the new episode from a fresh random state, each env on its own.
x = data["next", "observation"][..., 0]
fig, ax = plt.subplots(figsize=(7, 3))
for i in range(4):
    (line,) = ax.plot(x[i], lw=1.2, label=f"env {i}")
    ends = done[i].nonzero().flatten()
    ax.plot(ends, x[i, ends], "o", color=line.get_color(), ms=4)
ax.set_xlabel("step")
ax.set_ylabel("position x")
ax.legend(loc="upper right", fontsize=8, ncol=4)
fig.tight_layout()
plt.show()

# %%
# Graph capture
# -------------
# With ``capture=True`` the env records each launch sequence once with ``wp.ScopedCapture`` and
# replays it afterwards (on CUDA this is a CUDA graph; Warp 1.19 also captures on the CPU). The
# replayed trajectory is bitwise equal to eager stepping.
eager, graphed = PointEnv(NUM_ENVS, seed=2), PointEnv(NUM_ENVS, seed=2, capture=True)
actions = torch.rand(STEPS, NUM_ENVS, 1) * 2 - 1
timings = {}
for name, e in (("eager", eager), ("graph", graphed)):
    root = e.reset()
    start = time.perf_counter()
    for a in actions:
        root["action"] = a
        _, root = e.step_and_maybe_reset(root)
    timings[name] = time.perf_counter() - start
print("bitwise equal:", bool(torch.equal(wp.to_torch(eager.state), wp.to_torch(graphed.state))))
print({k: f"{NUM_ENVS * STEPS / v / 1e6:.2f}M env-steps/s" for k, v in timings.items()})

# %%
# Collecting with ``Collector``
# -----------------------------
# The env is a regular TorchRL env, so it plugs into ``Collector``; the collector's per-step
# ``step_and_maybe_reset`` call hits the fused path.
collector = Collector(PointEnv(16, seed=3), None, frames_per_batch=16 * STEPS, total_frames=-1)
batch = next(iter(collector))
collector.shutdown()
print(batch.shape, "episodes:", int(batch["next", "done"].sum()))

# %%
# The same machinery drives :class:`~torchrl_ext.envs.CartPoleEnv`, whose ``rollout`` without a
# policy runs one kernel for all steps and writes ``[N, T]`` outputs directly.
cartpole = CartPoleEnv(NUM_ENVS, seed=0)
start = time.perf_counter()
data = cartpole.rollout(STEPS, break_when_any_done=False)
elapsed = time.perf_counter() - start
print(data.shape, f"{NUM_ENVS * STEPS / elapsed / 1e6:.1f}M env-steps/s")
