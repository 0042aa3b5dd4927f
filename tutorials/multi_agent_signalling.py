"""
Multi-agent rollouts: agent groups, a shared done, one GAE per group
=====================================================================

:class:`~torchrl_ext.envs.SignallingEnv` is a two-agent game batched on Warp: a *speaker* sees a
target and sends a token, a *listener* sees the token once and must name the target a few steps
later. This tutorial shows the TorchRL multi-agent layout the env produces, steps it with a
hand-written code (the token names the target, the listener remembers it), and computes
advantages with one :class:`~torchrl_ext.objectives.RecurrentGAE` per agent group over the
shared done flags. It runs on the CPU in a second.
"""

# %%
# The layout
# ----------
# Each agent group is a nested TensorDict with its own specs (the observations have different
# sizes); the done flags are shared at the root. ``InitTracker`` adds the root ``is_init`` that
# recurrent modules read.

import matplotlib.pyplot as plt
import torch
from tensordict.nn import TensorDictModule
from torchrl.envs import InitTracker, TransformedEnv

from torchrl_ext.envs import SignallingEnv
from torchrl_ext.objectives import RecurrentGAE

VOCAB, DELAY, ENVS, STEPS = 4, 2, 8, 12
env = TransformedEnv(SignallingEnv(ENVS, seed=0, vocab=VOCAB, delay=DELAY), InitTracker())
root = env.reset()
print(root["speaker", "observation"].shape, root["listener", "observation"].shape)
print(sorted(str(k) for k in env.done_keys), sorted(str(k) for k in env.reward_keys))

# %%
# Playing the game by hand
# ------------------------
# The speaker sends the index of its one-hot target as the token on step 0; the listener keeps
# the token it sees on step 1 and answers it on its answer step. Every episode then pays 1.
# Episodes last ``DELAY + 2`` steps and auto-reset with fresh targets.

memory = torch.zeros(ENVS, dtype=torch.int64)
steps = []
for _ in range(STEPS):
    seen = root["listener", "observation"][:, :VOCAB]
    memory = torch.where(seen.sum(-1) > 0, seen.argmax(-1), memory)
    root["speaker", "action"] = root["speaker", "observation"].argmax(-1)
    root["listener", "action"] = memory
    td, root = env.step_and_maybe_reset(root)
    steps.append(td)
batch = torch.stack(steps, dim=1)  # [envs, time], env-major like a collector's batch
reward = batch["next", "listener", "reward"].squeeze(-1)
print("episodes:", int(batch["next", "done"].sum()), "reward:", reward.sum().item())

# %%
# One RecurrentGAE per group
# --------------------------
# A multi-agent batch is one plain ``[N, T]`` TensorDict, so an estimator per group, set to that
# group's reward, value and outputs and to the shared root flags, covers it. Here each group's
# critic is a small linear layer of its own observation.

torch.manual_seed(0)
for group, size in (("speaker", VOCAB), ("listener", VOCAB + 1)):
    critic = TensorDictModule(
        torch.nn.Linear(size, 1), [(group, "observation")], [(group, "state_value")]
    )
    gae = RecurrentGAE(gamma=0.9, lmbda=0.95, value_network=critic).set_keys(
        reward=(group, "reward"),
        value=(group, "state_value"),
        advantage=(group, "advantage"),
        value_target=(group, "value_target"),
        done="done",
        terminated="terminated",
    )
    with torch.no_grad():
        gae(batch)
print(batch["speaker", "advantage"].shape, batch["listener", "advantage"].shape)

# %%
# Both groups' advantages along one env's row: each episode ends on the listener's answer step
# (the shared ``done``), where both traces are cut.

fig, ax = plt.subplots(figsize=(6, 2.6))
time = torch.arange(STEPS)
for group, marker in (("speaker", "o"), ("listener", "s")):
    ax.plot(time, batch[group, "advantage"][0, :, 0], marker=marker, label=group)
for t in torch.nonzero(batch["next", "done"][0, :, 0]).flatten().tolist():
    ax.axvline(t + 0.5, color="grey", linewidth=0.8, linestyle="--")
ax.set_xlabel("step of env 0 (dashed: episode ends)")
ax.set_ylabel("advantage")
ax.legend(loc="upper left", fontsize=8)
fig.tight_layout()
plt.show()
