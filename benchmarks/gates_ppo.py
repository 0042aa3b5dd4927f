"""A short PPO run on gates courses: prints the mean return per iteration.

Usage: ``python benchmarks/gates_ppo.py [--iters 30] [--seed 0]``

Every episode is on a fresh course: laps, crashes (``crash="regenerate"``) and the time limit all
give the env its next ``(seed, epoch)`` course. A feed-forward Gaussian actor and a critic (two
tanh layers of 64) learn with TorchRL's ``ClipPPOLoss`` and GAE from 64 envs x 64 steps per
iteration. Each line prints the iteration, frames so far, the mean return and gates passed of the
episodes that ended in that iteration, and their count.
"""

from __future__ import annotations

import argparse
import math

import torch
import warp as wp
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.collectors import Collector
from torchrl.envs import ObservationNorm, TransformedEnv
from torchrl.modules import IndependentNormal, ProbabilisticActor
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

from torchrl_ext.envs import CourseEnv
from torchrl_ext.envs.course import CourseParams

NUM_ENVS, STEPS, HIDDEN = 64, 64, 64
SCALE = torch.tensor([0.2, 1.0, 0.5, 0.2, 0.2, 0.2, 0.2, 0.2])
"""Brings the gates observation to order 1: speed, heading error, lateral, posts, distance."""


def mlp(out_features: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(8, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN), nn.Tanh(),
        nn.Linear(HIDDEN, out_features),
    )  # fmt: skip


class Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mean = mlp(2)
        self.log_std = nn.Parameter(torch.full((2,), math.log(0.6)))

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loc = self.mean(observation)
        return loc, self.log_std.exp().expand_as(loc)


def make_env(seed: int) -> TransformedEnv:
    base = CourseEnv(
        NUM_ENVS, seed=seed, mode="gates", params=CourseParams(gate_width=4.0),
        crash="regenerate", max_steps=200,
    )  # fmt: skip
    norm = ObservationNorm(loc=torch.zeros(8), scale=SCALE, in_keys=["observation"])
    return TransformedEnv(base, norm)


def episode_stats(batch, running: torch.Tensor, gates: torch.Tensor) -> tuple[list, list]:
    """Returns and gates passed of the episodes that end in ``batch`` ([envs, steps])."""
    returns, passed = [], []
    reward = batch["next", "reward"].squeeze(-1)
    count = batch["next", "checkpoints_passed"].squeeze(-1)
    done = batch["next", "done"].squeeze(-1)
    for t in range(reward.shape[1]):
        running += reward[:, t]
        gates += count[:, t]
        ended = done[:, t]
        returns += running[ended].tolist()
        passed += gates[ended].tolist()
        running[ended] = 0.0
        gates[ended] = 0
    return returns, passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=30, help="PPO iterations")
    parser.add_argument("--seed", type=int, default=0, help="seed of courses and weights")
    args = parser.parse_args()
    wp.config.log_level = wp.LOG_WARNING
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    env = make_env(args.seed)
    actor = ProbabilisticActor(
        TensorDictModule(Head(), in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        distribution_class=IndependentNormal,
        return_log_prob=True,
    )
    critic = TensorDictModule(mlp(1), in_keys=["observation"], out_keys=["state_value"])
    loss = ClipPPOLoss(actor, critic, clip_epsilon=0.2, entropy_bonus=False, critic_coeff=0.5)
    gae = GAE(gamma=0.99, lmbda=0.95, value_network=critic)
    optim = torch.optim.Adam(loss.parameters(), lr=1e-3)
    frames_per_batch = NUM_ENVS * STEPS
    collector = Collector(
        env,
        actor,
        frames_per_batch=frames_per_batch,
        total_frames=args.iters * frames_per_batch,
        auto_register_policy_transforms=False,
    )
    running, gates = torch.zeros(NUM_ENVS), torch.zeros(NUM_ENVS, dtype=torch.int64)
    frames = 0
    print("iter  frames   return  gates  episodes")
    for it, batch in enumerate(collector):
        frames += batch.numel()
        returns, passed = episode_stats(batch, running, gates)
        with torch.no_grad():
            gae(batch)
        flat = batch.reshape(-1)
        for _ in range(4):
            order = torch.randperm(flat.numel())
            for first in range(0, flat.numel(), 1024):
                out = loss(flat[order[first : first + 1024]])
                total = out["loss_objective"] + out["loss_critic"]
                optim.zero_grad(set_to_none=True)
                total.backward()
                nn.utils.clip_grad_norm_(loss.parameters(), 0.5)
                optim.step()
        mean_return = sum(returns) / max(len(returns), 1)
        mean_gates = sum(passed) / max(len(passed), 1)
        print(f"{it:>4}  {frames:>6}  {mean_return:7.2f}  {mean_gates:5.2f}  {len(returns):>8}")
    collector.shutdown()


if __name__ == "__main__":
    main()
