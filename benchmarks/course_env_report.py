"""Prints the CourseEnv step-cost table (CPU, 1 torch thread, medians).

Usage: ``python benchmarks/course_env_report.py [--envs 1024,16384] [--rounds 30]``

Each row times one full RL step of ``N`` envs: car physics, progress events, reward and done
flags, masked regeneration of the envs whose episode ended (new courses), respawn of the crashed
ones and the next observations. Actions are random in ``[-1, 1]`` (redrawn outside the timed
region), so envs crash, finish and time out as in training. Columns:

- ``kernels eager``: the step's launches one by one (``env._launcher.run("step_autoreset")``);
- ``kernels captured``: replay of the step recorded into one Warp graph;
- ``torchrl eager`` / ``torchrl captured``: ``env.step_and_maybe_reset(td)``, which adds the action
  copy and the output TensorDicts;
- ``Msteps/s``: env-steps per second of ``kernels captured``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import warp as wp

from torchrl_ext.envs import CourseEnv

MODES = ("kernels eager", "kernels captured", "torchrl eager", "torchrl captured")


def make_step(num_envs: int, mode: str) -> tuple[Callable[[], None], Callable[[], None], CourseEnv]:
    """``(step, new_actions, env)``: one full RL step in ``mode`` and a way to redraw actions."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got mode={mode!r}.")
    env = CourseEnv(num_envs, seed=0, max_steps=200, capture=mode.endswith("captured"))
    gen = torch.Generator().manual_seed(0)
    state = {"root": env.reset()}

    def new_actions() -> None:
        action = torch.rand(num_envs, 2, generator=gen) * 2 - 1
        if mode.startswith("kernels"):
            env._layout.actions["action"].copy_(action)
        else:
            state["root"]["action"] = action

    def torchrl_step() -> None:
        _, state["root"] = env.step_and_maybe_reset(state["root"])

    new_actions()
    if mode.startswith("kernels"):
        return (lambda: env._launcher.run("step_autoreset")), new_actions, env
    return torchrl_step, new_actions, env


def measure(num_envs: int, rounds: int) -> dict[str, float]:
    """Median ms per step of ``num_envs`` envs, modes timed in interleaved rounds."""
    cases = {mode: make_step(num_envs, mode) for mode in MODES}
    for step, new_actions, _ in cases.values():  # record graphs, load kernels
        new_actions()
        step()
    times = {mode: [] for mode in MODES}
    for _ in range(rounds):
        for mode, (step, new_actions, _) in cases.items():
            new_actions()
            start = time.perf_counter()
            step()
            times[mode].append(time.perf_counter() - start)
    return {mode: statistics.median(t) * 1e3 for mode, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--envs", default="1024,16384")
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    wp.config.log_level = wp.LOG_WARNING
    print("ms per full RL step (median), CourseEnv, CPU, 1 torch thread")
    print(f"{'N':>6} " + " ".join(f"{mode:>17}" for mode in MODES) + f" {'Msteps/s':>9}")
    for num_envs in [int(n) for n in args.envs.split(",")]:
        row = measure(num_envs, args.rounds)
        rate = num_envs / row["kernels captured"] / 1e3
        print(f"{num_envs:>6} " + " ".join(f"{row[m]:>17.3f}" for m in MODES) + f" {rate:>9.2f}")


if __name__ == "__main__":
    main()
