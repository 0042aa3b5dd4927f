"""
Writing a Warp environment for TorchRL
======================================

:class:`~torchrl_ext.envs.WarpEnv` turns a batch of simulations written in NVIDIA Warp into a
TorchRL environment. An env is its specs, its per-env state and three Warp functions: ``start``
begins an episode, ``advance`` applies one action, ``observe`` writes an observation. The base
class generates the kernels around them, with step counting and the time limit, the done flags,
masked resets, per-env seeding, the fused auto-reset, a one-kernel rollout and saving.

This tutorial writes a point-mass env in about forty lines, resets some of its envs with a mask,
follows its auto-reset, writes a second env with two agent groups, compares a Python loop of
steps with the one-kernel rollout, and collects data with :class:`torchrl.collectors.Collector`.

Set ``TORCHRL_EXT_FAST=1`` to shrink the sizes (the documentation build does).
"""

# %%
# Setup
# -----
# Warp compiles kernels on first use and caches them, so the first run of this script is slower.
import os
import time
from typing import Any

import matplotlib.pyplot as plt
import torch
import warp as wp
from torchrl.collectors import Collector
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import InitTracker, TransformedEnv
from torchrl.envs.utils import check_env_specs

from torchrl_ext.envs.warp_env import (
    WarpEnv,
    WarpFunctions,
    state_view,
    uniform64,
    uniform_range,
)

wp.config.log_level = wp.LOG_WARNING
torch.manual_seed(0)
FAST = os.environ.get("TORCHRL_EXT_FAST") == "1"
STEPS = 50 if FAST else 200

# %%
# A point mass in forty lines
# ---------------------------
# Each env is a point mass on a line that must be pushed back to the origin: state ``(x, v)``,
# action a force in ``[-1, 1]``, reward ``-x**2``. An episode terminates when ``|x| > 2`` and
# is truncated after ``max_steps=100`` steps.
#
# The three functions see one env, ``i``. ``s`` holds the state arrays the env declares in
# ``_state_arrays`` (``s.x``, ``s.v``, each ``[num_envs]``), ``p`` its constants from
# ``_constants`` (``p.dt``), ``a`` and ``o`` its action and observation entries, named after
# their keys and indexed ``[i, ...]``: the base copies the step's actions in and the
# observation out to where each step belongs, in a step as in a 1,000-step rollout. A trailing
# singleton dim is dropped, so the ``[num_envs, 1]`` action is ``a.action[i]``. ``step`` counts
# the episode's steps. ``key`` names a random stream of the function's own: in ``start`` that of
# ``(seed, env, episode)``, in ``advance`` and ``observe`` one of ``(seed, env, episode, step)``
# (this env draws only its start state). An episode's numbers never depend on which other envs
# reset, nor on the batch size, and the state holds no random key.


@wp.func
def point_start(s: Any, p: Any, i: int, key: wp.uint32):
    s.x[i] = s.x.dtype(uniform_range(key, 0, wp.float64(-1.0), wp.float64(1.0)))
    s.v[i] = s.v.dtype(0.0)


@wp.func
def point_advance(s: Any, p: Any, a: Any, i: int, step: int, key: wp.uint32):
    v = s.v[i] + p.dt * wp.clamp(a.action[i], -1.0, 1.0)
    x = s.x[i] + p.dt * v
    s.x[i] = x
    s.v[i] = v
    return -x * x, wp.abs(x) > p.limit  # (reward, terminated)


@wp.func
def point_observe(s: Any, p: Any, o: Any, i: int, step: int, key: wp.uint32):
    o.observation[i, 0] = s.x[i]
    o.observation[i, 1] = s.v[i]


class PointEnv(WarpEnv):
    """Point masses pushed towards the origin (tutorial env)."""

    functions = WarpFunctions(point_start, point_advance, point_observe)

    def __init__(self, num_envs: int, seed: int | None = None, **kwargs: Any) -> None:
        super().__init__(num_envs, "cpu", seed, max_steps=100, **kwargs)

    def _make_specs(self) -> None:
        n = self.num_envs
        self.observation_spec = Composite(observation=Unbounded((n, 2)), shape=(n,))
        self.action_spec = Bounded(-1.0, 1.0, shape=(n, 1))
        self.reward_spec = Unbounded((n, 1))

    def _state_arrays(self) -> dict:
        return {"x": float, "v": float}  # float: the env's float dtype, float32 here

    def _constants(self) -> dict:
        return {"dt": 0.1, "limit": 2.0}

    x = state_view("x", "The ``[num_envs]`` positions.")


env = PointEnv(8, seed=0)
check_env_specs(env)
print(env)

# %%
# What the base generates
# -----------------------
# From these functions the base builds two kernels: a masked reset (``start`` for the masked
# envs, then ``observe`` of every env) and a ``T``-step kernel. One step of env ``i`` in it is:
#
# 1. ``advance`` under the action of slot ``t``; it returns ``(reward, terminated)``, and
#    ``step`` is the number of steps its episode has taken before this one (0 on the first);
# 2. the step counter is incremented; reaching ``max_steps`` sets ``truncated``;
# 3. ``observe`` writes ``("next", ...)``, the true final observation when the episode ends;
# 4. the reward is written into every reward entry, and ``terminated``, ``truncated`` and
#    ``done`` into the shared root flags;
# 5. in the fused auto-reset, a done env begins its next episode (``start``) at once;
# 6. ``observe`` writes the next root: the reset observation where an episode ended.
#
# ``step`` runs steps 1 to 4 with ``T = 1``, ``step_and_maybe_reset`` all six; a policy-free
# ``rollout(T, break_when_any_done=False)`` runs the kernel once for all ``T`` steps. These
# TorchRL methods are ``WarpEnv``'s own, right after its authoring contract in
# ``torchrl_ext/envs/warp_env.py``: each loads the actions, launches the kernels and hands out
# fresh TensorDicts, so the class an env subclasses holds its whole step. The
# declared state is what :meth:`~torchrl_ext.envs.WarpEnv.state_dict` saves, with the seed, the
# per-env counters, the flags and the last outputs (printed below); ``pickle`` and
# ``copy.deepcopy`` copy the same state, and a restored env continues bitwise.
for name, value in env.state_dict().items():
    print(f"{name:17s} {value.dtype} {tuple(value.shape)}")

# %%
# Masked resets
# -------------
# ``reset`` with a ``"_reset"`` mask resets exactly the masked envs; the others keep their state
# bit for bit. Here we push every env for a few steps, then reset envs 0 and 3 only. As
# everywhere in TorchRL, the mask travels in the tensordict that holds the current data, which
# keeps the entries of the envs that are not reset.
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
# holds the reset observation. With :class:`~torchrl.envs.InitTracker`, ``is_init`` is True on
# the first step of every episode, terminated or truncated.
tracked = TransformedEnv(PointEnv(8, seed=1), InitTracker())
data = tracked.rollout(STEPS, break_when_any_done=False)
done = data["next", "done"][..., 0]
is_init = data["is_init"][..., 0]
print("episodes finished:", int(done.sum()))
print("is_init follows done:", bool(torch.equal(is_init[:, 1:], done[:, :-1])))

# %%
# The position of four envs over the rollout (random actions). A dot marks the last step of an
# episode; the next step starts the new episode from a fresh random state, each env on its own.
position = data["next", "observation"][..., 0]
fig, ax = plt.subplots(figsize=(7, 3))
for i in range(4):
    (line,) = ax.plot(position[i], lw=1.2, label=f"env {i}")
    ends = done[i].nonzero().flatten()
    ax.plot(ends, position[i, ends], "o", color=line.get_color(), ms=4)
ax.set_xlabel("step")
ax.set_ylabel("position x")
ax.legend(loc="upper right", fontsize=8, ncol=4)
fig.tight_layout()
plt.show()

# %%
# Two agent groups
# ----------------
# Agent groups are nested keys, laid out as TorchRL's multi-agent envs lay them out: each group
# is a nested TensorDict with its own observation, action and reward, and the done flags are
# shared at the root. In the functions a nested key is a field named by its parts joined with
# ``_``: ``("alice", "action")`` is ``a.alice_action``, ``("bob", "observation")`` is
# ``o.bob_observation``.
#
# In this game each agent sees its own random bit, as a one-hot observation, on step 0 only, and
# must answer it on step 1, which ends the episode. ``advance`` returns one scalar reward, the
# fraction of the two agents that answered right, and the base writes it into both groups'
# reward entries.


@wp.func
def copy_start(s: Any, p: Any, i: int, key: wp.uint32):
    for g in range(2):
        s.bits[i, g] = wp.where(uniform64(key, g) < wp.float64(0.5), 0, 1)


@wp.func
def copy_advance(s: Any, p: Any, a: Any, i: int, step: int, key: wp.uint32):
    right = 0.0
    if step == 1:
        right += wp.where(a.alice_action[i] == wp.int64(s.bits[i, 0]), 0.5, 0.0)
        right += wp.where(a.bob_action[i] == wp.int64(s.bits[i, 1]), 0.5, 0.0)
    return right, step == 1


@wp.func
def copy_observe(s: Any, p: Any, o: Any, i: int, step: int, key: wp.uint32):
    for v in range(2):
        o.alice_observation[i, v] = wp.where(step == 0 and v == s.bits[i, 0], 1.0, 0.0)
        o.bob_observation[i, v] = wp.where(step == 0 and v == s.bits[i, 1], 1.0, 0.0)


class CopyBitEnv(WarpEnv):
    """Two agents each repeat a bit they saw one step earlier (tutorial env)."""

    functions = WarpFunctions(copy_start, copy_advance, copy_observe)

    def _make_specs(self) -> None:
        n = self.num_envs

        def groups(leaf: str, spec: Any) -> Composite:
            group = {g: Composite({leaf: spec.clone()}, shape=(n,)) for g in ("alice", "bob")}
            return Composite(group, shape=(n,))

        self.observation_spec = groups("observation", Bounded(0.0, 1.0, shape=(n, 2)))
        self.full_action_spec = groups("action", Categorical(2, shape=(n,)))
        self.full_reward_spec = groups("reward", Unbounded((n, 1)))

    def _state_arrays(self) -> dict:
        return {"bits": (torch.int32, (2,))}

    bits = state_view("bits", "The ``[num_envs, 2]`` bits of the current episodes.")


pair = CopyBitEnv(8, seed=0)
check_env_specs(pair)
print(sorted(pair.full_action_spec.keys(True, True)), pair.done_keys)

# %%
# A random policy is right half of the time. An agent that remembers its bit earns 1 on every
# answer step; here the answer is read from the env's state, :attr:`bits`, to show the reward
# reaching both groups.
data = pair.rollout(STEPS, break_when_any_done=False)
answers = data["next", "done"]
mean = data["next", "alice", "reward"][answers].mean().item()
print(f"random policy, mean reward on answer steps: {mean:.2f}")
root = pair.reset()
root["alice", "action"] = torch.zeros(8, dtype=torch.int64)  # step 0: ignored
root["bob", "action"] = torch.zeros(8, dtype=torch.int64)
_, root = pair.step_and_maybe_reset(root)
root["alice", "action"] = pair.bits[:, 0].long()
root["bob", "action"] = pair.bits[:, 1].long()
td, root = pair.step_and_maybe_reset(root)
print("alice's reward:", td["next", "alice", "reward"].flatten().tolist())
print("bob's reward:  ", td["next", "bob", "reward"].flatten().tolist())
print("done:", td["next", "done"].flatten().tolist())

# %%
# One kernel for ``T`` steps
# --------------------------
# ``rollout(T, break_when_any_done=False)`` without a policy draws the random actions of all
# ``T`` steps up front and runs the ``T``-step kernel once, writing ``[num_envs, T]`` outputs
# directly. A Python loop of ``step_and_maybe_reset`` (what TorchRL's rollout with a policy, and
# a ``Collector``, do) launches the same kernel ``T`` times with ``T = 1`` and builds the
# TensorDicts of every step. Both are timed below at several sizes, ``TIMED_STEPS`` steps each,
# best of five calls after a warm-up call, with one torch thread. The two are timed in turn, so
# that a busy moment of the machine slows both. These sizes are the same with
# ``TORCHRL_EXT_FAST=1``: the whole section takes a few seconds on a CPU.
TIMED_STEPS = 200


def one_kernel(env: PointEnv) -> None:
    env.rollout(TIMED_STEPS, break_when_any_done=False)


def python_loop(env: PointEnv) -> None:
    root = env.reset()
    for _ in range(TIMED_STEPS):
        env.rand_action(root)
        _, root = env.step_and_maybe_reset(root)


def best_times(n: int, rounds: int = 5) -> dict:
    """Best time of each way, over ``rounds`` interleaved rounds after a warm-up round."""
    ways = {
        "rollout": (one_kernel, PointEnv(n, seed=2)),
        "loop": (python_loop, PointEnv(n, seed=2)),
    }
    best = dict.fromkeys(ways, float("inf"))
    for r in range(rounds + 1):
        for name, (run, env) in ways.items():
            start = time.perf_counter()
            run(env)
            if r > 0:  # round 0 loads the kernels
                best[name] = min(best[name], time.perf_counter() - start)
    return best


threads = torch.get_num_threads()
torch.set_num_threads(1)  # figures that do not depend on how busy the other cores are
print(f"{'envs':>6} {'rollout':>10} {'loop':>10} {'rollout/loop':>13}")
for n in (64, 1024, 16384):
    t = best_times(n)
    rates = [f"{n * TIMED_STEPS / t[k] / 1e6:9.2f}M" for k in ("rollout", "loop")]
    print(f"{n:>6} {rates[0]:>10} {rates[1]:>10} {t['loop'] / t['rollout']:12.1f}x")
torch.set_num_threads(threads)

# %%
# The figures are env-steps per second. A step of this env is a few arithmetic operations per
# env, so at small sizes the loop's time is its per-step Python and TensorDict work, which the
# rollout pays once per call; as the number of envs grows, the simulation itself takes a larger
# share of both and the ratio shrinks. These are best-of-five times of one process while the
# page is built; :doc:`/benchmarks/envs` compares the same paths for CartPole at 1,024 and
# 16,384 envs, as medians, against gymnasium's vector env and TorchRL's generic reset path.
#
# Graph capture
# -------------
# With ``capture=True`` each launch sequence (the step, the fused step, the masked reset) is
# recorded once with :class:`warp.ScopedCapture` and replayed afterwards; the replayed
# trajectory is bitwise equal to eager stepping. A generated env launches one kernel per step,
# so a graph saves only the Python cost of that one launch, a few microseconds on the CPU, small
# next to the TensorDict work of a step (the loop column above); at small sizes that per-step
# overhead, not the simulation, sets the pace either way. Graphs help mostly on CUDA, where every
# launch costs host time while the GPU waits, and for envs whose step is several kernels.
eager, graphed = PointEnv(64, seed=3), PointEnv(64, seed=3, capture=True)
actions = torch.rand(STEPS, 64, 1) * 2 - 1
for e in (eager, graphed):
    root = e.reset()
    for a in actions:
        root["action"] = a
        _, root = e.step_and_maybe_reset(root)
print("bitwise equal:", bool(torch.equal(eager.x, graphed.x)))

# %%
# Collecting with ``Collector``
# -----------------------------
# The env is a regular TorchRL env, so it plugs into ``Collector``; the collector's per-step
# ``step_and_maybe_reset`` call takes the fused path.
# 200 steps per env: every env reaches the time limit (100 steps) at least once.
collector = Collector(PointEnv(16, seed=4), None, frames_per_batch=16 * 200, total_frames=-1)
batch = next(iter(collector))
collector.shutdown()
print(batch.shape, "episodes:", int(batch["next", "done"].sum()))
