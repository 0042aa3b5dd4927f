"""
Recurrent PPO on a POPGym memory task
=====================================

POPGym's tasks cannot be solved from the current observation alone: the agent must remember
what it saw. This tutorial trains an LSTM policy with PPO on one of them, in the style of
TorchRL's own recurrent tutorial, from TorchRL's parts (``TransformedEnv``, ``InitTracker``,
``Collector``, ``ProbabilisticActor``, ``ClipPPOLoss``) and this package's: the Warp port of
the task (``torchrl_ext.envs.popgym``, see :doc:`../concepts/popgym`),
:class:`~torchrl_ext.modules.LSTMModule` (TorchRL's module, with whole rows in recurrent mode),
:class:`~torchrl_ext.objectives.RecurrentGAE` and :class:`~torchrl_ext.data.EnvMajorMinibatches`.
It trains in well under a minute on one CPU thread with ``TORCHRL_EXT_FAST=1`` (the
documentation build sets it); without it, it trains longer and the return climbs further.
"""

# %%
# The task
# --------
# In RepeatPrevious (Easy), each step shows the suit of a newly dealt card, and from the fourth
# step on the agent is paid for naming the suit shown four steps earlier: ``+1/48`` if right,
# ``-1/48`` if wrong, over an episode of 51 steps. An agent without memory is right one time in
# four, for a return of about -0.5; one that remembers the last four suits scores 1.
#
# :func:`~torchrl_ext.envs.popgym.make` builds the port by popgym's name, with the layout
# TorchRL's ``GymEnv("popgym-RepeatPreviousEasy-v0")`` gives: one-hot ``int64`` observations
# and actions, a batch of envs in front (the port classes, such as
# :class:`~torchrl_ext.envs.popgym.RepeatPreviousEnv`, give category indices instead). The
# observation encoding is then one TorchRL transform, ``DTypeCastTransform``, which makes the
# one-hot observation float features for the LSTM.
# ``InitTracker`` marks each episode's first step (``is_init``), where the LSTM restarts from
# zeros; ``RewardSum`` keeps each episode's return.

import os
import time

import matplotlib.pyplot as plt
import torch
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.collectors import Collector
from torchrl.envs import Compose, DTypeCastTransform, InitTracker, RewardSum, TransformedEnv
from torchrl.modules import MLP, OneHotCategorical, ProbabilisticActor, set_recurrent_mode
from torchrl.objectives import ClipPPOLoss

from torchrl_ext.data.minibatches import EnvMajorMinibatches
from torchrl_ext.envs import popgym
from torchrl_ext.modules import LSTMModule
from torchrl_ext.objectives import RecurrentGAE

FAST = os.environ.get("TORCHRL_EXT_FAST") == "1"
N_ENVS, STEPS, HIDDEN = 32, 64, 64
ITERATIONS = 24 if FAST else 100
torch.manual_seed(0)

env = TransformedEnv(
    popgym.make("popgym-RepeatPreviousEasy-v0", num_envs=N_ENVS, seed=0),
    Compose(
        DTypeCastTransform(torch.int64, torch.float32, in_keys=["observation"]),
        InitTracker(),
        RewardSum(),
    ),
)
n_suits = env.action_spec.shape[-1]
td = env.reset()
print("observation of env 0:", td["observation"][0].tolist(), td["observation"].dtype)
print("action spec:", type(env.action_spec).__name__, tuple(env.action_spec.shape))

# %%
# Actor and critic
# ----------------
# Each reads the observation through its own LSTM, then a small MLP: the actor's gives the
# logits of a one-hot categorical over the four suits, the critic's the state value. The
# LSTMs' primers make the env carry their states between steps, so the collector starts each
# batch from where the last one stopped, and each batch holds the states the rows started from.
# A forget-gate bias of 1 keeps the memory from fading in the first updates.


def make_lstm(name: str) -> LSTMModule:
    lstm = LSTMModule(
        input_size=n_suits,
        hidden_size=HIDDEN,
        in_keys=["observation", f"{name}_h", f"{name}_c"],
        out_keys=[f"{name}_embed", ("next", f"{name}_h"), ("next", f"{name}_c")],
    )
    with torch.no_grad():
        for bias in (lstm.lstm.bias_ih_l0, lstm.lstm.bias_hh_l0):
            bias[HIDDEN : 2 * HIDDEN] = 0.5  # the forget gate's slice: 0.5 + 0.5
    return lstm


actor_lstm, critic_lstm = make_lstm("actor"), make_lstm("critic")
actor = ProbabilisticActor(
    TensorDictSequential(
        actor_lstm,
        TensorDictModule(
            MLP(in_features=HIDDEN, out_features=n_suits, num_cells=[HIDDEN]),
            in_keys=["actor_embed"],
            out_keys=["logits"],
        ),
    ),
    in_keys=["logits"],
    distribution_class=OneHotCategorical,
    spec=env.action_spec,
    return_log_prob=True,
)
critic = TensorDictSequential(
    critic_lstm,
    TensorDictModule(
        MLP(in_features=HIDDEN, out_features=1, num_cells=[HIDDEN]),
        in_keys=["critic_embed"],
        out_keys=["state_value"],
    ),
)
env.append_transform(actor_lstm.make_tensordict_primer())
env.append_transform(critic_lstm.make_tensordict_primer())

# %%
# Collecting and estimating advantages
# ------------------------------------
# The collector gives batches ``[N_ENVS, STEPS]``, envs first and time last. As its
# ``postproc``, :class:`~torchrl_ext.objectives.RecurrentGAE` runs the critic's LSTM once over
# each whole row, from the stored state at the row's first step and from zeros at every
# ``is_init``, and writes ``"advantage"`` and ``"value_target"``.

gae = RecurrentGAE(gamma=0.99, lmbda=0.95, value_network=critic)
collector = Collector(
    env,
    actor,
    frames_per_batch=N_ENVS * STEPS,
    total_frames=N_ENVS * STEPS * ITERATIONS,
    postproc=gae,
)

# %%
# Training
# --------
# PPO's clipped loss on env-major minibatches: whole rows of a quarter of the envs, each env
# once per epoch, so that the LSTMs run over rows in the order they were collected. In
# recurrent mode (``set_recurrent_mode``), our ``LSTMModule`` computes each row in one pass,
# cut at ``is_init``. We print the mean return of the episodes that ended in each batch.

loss = ClipPPOLoss(actor, critic, entropy_coeff=0.01)
loss.make_value_estimator(gae)
optim = torch.optim.Adam(loss.parameters(), lr=2e-3)
generator = torch.Generator().manual_seed(0)
returns, frames = [], []
start = time.perf_counter()
for i, batch in enumerate(collector):
    ended = batch["next", "done"]
    returns.append(batch["next", "episode_reward"][ended].mean().item())
    frames.append((i + 1) * batch.numel())
    for minibatch in EnvMajorMinibatches(batch, N_ENVS // 4, epochs=4, generator=generator):
        with set_recurrent_mode(True):
            losses = loss(minibatch)
        total = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
        optim.zero_grad()
        total.backward()
        nn.utils.clip_grad_norm_(loss.parameters(), 0.5)
        optim.step()
    if i % 4 == 3 or i == 0:
        print(f"batch {i + 1:3d}: {frames[-1]:6d} frames, mean return {returns[-1]:+.3f}")
collector.shutdown()
print(f"trained in {time.perf_counter() - start:.0f} s")

# %%
# The learning curve
# ------------------
# Chance is -0.5 (the dashed line): the rise above it is the memory at work.

fig, ax = plt.subplots(figsize=(6, 3))
ax.plot(frames, returns, "o-", ms=3)
ax.axhline(-0.5, color="k", ls="--", lw=0.8, label="no memory (chance)")
ax.axhline(1.0, color="C2", ls=":", lw=0.8, label="perfect memory")
ax.set_xlabel("frames")
ax.set_ylabel("mean episode return")
ax.legend(fontsize=8, loc="lower right")
fig.tight_layout()
plt.show()
