"""
Recurrent GAE with a TorchRL collector and PPO
==============================================

This tutorial collects rollouts with a recurrent (LSTM) policy, computes advantages with
:class:`~torchrl_ext.objectives.RecurrentGAE`, and trains with TorchRL's ``ClipPPOLoss`` on
env-major minibatches of whole rows. It runs on the CPU in a few seconds; set
``TORCHRL_EXT_FAST=1`` to shrink it further.
"""

# %%
# Setup
# -----
# A tiny batched environment stands in for a real one: random observations, an episode ends
# with probability 0.25 per step (termination), and a ``StepCounter`` truncates episodes at
# 6 steps, so the rollout holds terminated and truncated steps.

import os

import matplotlib.pyplot as plt
import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.collectors import Collector
from torchrl.data import Composite, Unbounded
from torchrl.envs import Compose, EnvBase, InitTracker, StepCounter, TransformedEnv
from torchrl.modules import LSTMModule, ProbabilisticActor, TanhNormal, set_recurrent_mode
from torchrl.objectives import ClipPPOLoss

from torchrl_ext.data.minibatches import EnvMajorMinibatches
from torchrl_ext.objectives import RecurrentGAE

FAST = os.environ.get("TORCHRL_EXT_FAST", "0") == "1"
N_ENVS, STEPS, ITERATIONS = (4, 8, 2) if FAST else (8, 16, 5)
OBS, HIDDEN = 3, 16
torch.manual_seed(0)


class TinyEnv(EnvBase):
    """Random observations; reward is the action's agreement with the first observation."""

    def __init__(self, n_envs: int, seed: int = 0):
        super().__init__(batch_size=[n_envs])
        self.observation_spec = Composite(
            observation=Unbounded(shape=(n_envs, OBS)), shape=(n_envs,)
        )
        self.action_spec = Unbounded(shape=(n_envs, 1))
        self.reward_spec = Unbounded(shape=(n_envs, 1))
        self._gen = torch.Generator().manual_seed(seed)
        self._obs = torch.zeros(n_envs, OBS)

    def _reset(self, td):
        mask = td.get("_reset", None) if td is not None else None
        fresh = torch.randn(self._obs.shape, generator=self._gen)
        self._obs = fresh if mask is None else torch.where(mask.view(-1, 1), fresh, self._obs)
        flags = torch.zeros(*self.batch_size, 1, dtype=torch.bool)
        return TensorDict(
            {"observation": self._obs.clone(), "done": flags, "terminated": flags.clone()},
            batch_size=self.batch_size,
        )

    def _step(self, td):
        reward = -(td["action"] - self._obs[:, :1].tanh()).abs()
        self._obs = torch.randn(self._obs.shape, generator=self._gen)
        ended = torch.rand(*self.batch_size, 1, generator=self._gen) < 0.25
        return TensorDict(
            {
                "observation": self._obs.clone(),
                "reward": reward,
                "done": ended.clone(),
                "terminated": ended,
            },
            batch_size=self.batch_size,
        )

    def _set_seed(self, seed):
        self._gen.manual_seed(0 if seed is None else seed)


# %%
# Actor and critic
# ----------------
# Both read the observation through their own LSTM. The primers make the environment carry
# the recurrent states, so the collector warm-starts each batch from the last one.

actor_lstm = LSTMModule(
    input_size=OBS,
    hidden_size=HIDDEN,
    in_keys=["observation", "actor_h", "actor_c"],
    out_keys=["actor_embed", ("next", "actor_h"), ("next", "actor_c")],
)
actor = ProbabilisticActor(
    TensorDictSequential(
        actor_lstm,
        TensorDictModule(nn.Linear(HIDDEN, 2), in_keys=["actor_embed"], out_keys=["params"]),
        TensorDictModule(NormalParamExtractor(), in_keys=["params"], out_keys=["loc", "scale"]),
    ),
    in_keys=["loc", "scale"],
    distribution_class=TanhNormal,
    return_log_prob=True,
)
critic_lstm = LSTMModule(
    input_size=OBS,
    hidden_size=HIDDEN,
    in_keys=["observation", "critic_h", "critic_c"],
    out_keys=["critic_embed", ("next", "critic_h"), ("next", "critic_c")],
)
critic = TensorDictSequential(
    critic_lstm,
    TensorDictModule(nn.Linear(HIDDEN, 1), in_keys=["critic_embed"], out_keys=["state_value"]),
)
env = TransformedEnv(
    TinyEnv(N_ENVS),
    Compose(
        InitTracker(),
        StepCounter(max_steps=6),
        actor_lstm.make_tensordict_primer(),
        critic_lstm.make_tensordict_primer(),
    ),
)

# %%
# RecurrentGAE as the collector's postproc
# ----------------------------------------
# Every batch ``[N_ENVS, STEPS]`` leaves the collector with ``"advantage"`` and
# ``"value_target"``. The critic's LSTM runs once over whole rows, resetting at ``is_init``;
# truncated steps bootstrap from the value of their true final observation.

gae = RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=critic)
collector = Collector(
    env,
    actor,
    frames_per_batch=N_ENVS * STEPS,
    total_frames=N_ENVS * STEPS * ITERATIONS,
    postproc=gae,
)

# %%
# The two masks on one row
# ------------------------
# ``done`` cuts the trace at a step; ``is_init`` (the reset mask) is ``done`` one step later.

batch = next(iter(collector)).clone()
row = batch[0]
print("truncated", row["next", "truncated"].squeeze(-1).int().tolist())
print("terminated", row["next", "terminated"].squeeze(-1).int().tolist())
print("is_init  ", row["is_init"].squeeze(-1).int().tolist())
print("is_init[1:] == done[:-1]:", bool((row["is_init"][1:] == row["next", "done"][:-1]).all()))
print("advantage", tuple(batch["advantage"].shape))

# %%
# The same row drawn: the critic's value, the GAE target and the advantage at each step. Grey
# bands mark the first step of each episode (``is_init``), where the critic's LSTM restarts from
# a zero state; the target bootstraps after a truncated step (|) but not after a terminated one
# (x).
steps = torch.arange(row.shape[0])
fig, ax = plt.subplots(figsize=(7, 3))
for t in row["is_init"].squeeze(-1).nonzero().flatten():
    ax.axvspan(t - 0.5, t + 0.5, color="0.9")
ax.plot(steps, row["state_value"].squeeze(-1).detach(), "o-", label="state_value")
ax.plot(steps, row["value_target"].squeeze(-1), "s-", label="value_target")
ax.bar(steps, row["advantage"].squeeze(-1), color="C2", alpha=0.5, label="advantage")
for key, marker in (("terminated", "x"), ("truncated", "|")):
    at = row["next", key].squeeze(-1).nonzero().flatten()
    ax.plot(at, torch.zeros(len(at)), marker, color="k", ms=10, mew=2)
ax.axhline(0, color="k", lw=0.5)
ax.set_xlabel("step")
ax.legend(fontsize=8, ncol=3, loc="upper left")
fig.tight_layout()
plt.show()

# %%
# PPO on env-major minibatches
# ----------------------------
# ``make_value_estimator`` installs the same estimator in the loss; since the batch already
# holds advantages, the loss uses them. Minibatches are whole rows, envs shuffled, each env
# once per epoch.

loss = ClipPPOLoss(actor, critic)
loss.make_value_estimator(gae)
optim = torch.optim.Adam(loss.parameters(), lr=3e-3)
generator = torch.Generator().manual_seed(0)
for i, batch in enumerate(collector):
    for minibatch in EnvMajorMinibatches(batch, N_ENVS // 2, epochs=2, generator=generator):
        with set_recurrent_mode(True):
            losses = loss(minibatch)
        total = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
        optim.zero_grad()
        total.backward()
        optim.step()
    print(
        f"iteration {i}: minibatch {tuple(minibatch.batch_size)}, loss finite:",
        bool(total.isfinite()),
    )
collector.shutdown()
