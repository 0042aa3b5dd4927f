"""Env-steps/s of every POPGym port against the same POPGym env in gymnasium's vector env.

Usage::

    PYTHONPATH=. python benchmarks/popgym_report.py [--envs 1024] [--steps 200] [--reps 3]

One torch thread. For each env (Easy preset), ours runs ``rollout(steps,
break_when_any_done=False)`` on ``--envs`` envs (one kernel for all steps, random actions drawn
up front); POPGym's runs ``gymnasium.vector.SyncVectorEnv`` of ``--envs`` copies for a few vector
steps with random actions (it is slow: a few steps give a stable rate). Each pair is timed
``reps`` times, alternating, after a warm-up; the table gives medians and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import numpy as np
import torch

from torchrl_ext.envs import popgym as ours

#: Our port and POPGym's Easy class, by POPGym's name.
PAIRS = {
    "RepeatFirst": ("RepeatFirstEnv", "popgym.envs.repeat_first", "RepeatFirstEasy"),
    "RepeatPrevious": ("RepeatPreviousEnv", "popgym.envs.repeat_previous", "RepeatPreviousEasy"),
    "Autoencode": ("AutoencodeEnv", "popgym.envs.autoencode", "AutoencodeEasy"),
    "CountRecall": ("CountRecallEnv", "popgym.envs.count_recall", "CountRecallEasy"),
    "HigherLower": ("HigherLowerEnv", "popgym.envs.higher_lower", "HigherLowerEasy"),
    "Concentration": ("ConcentrationEnv", "popgym.envs.concentration", "ConcentrationEasy"),
    "MultiarmedBandit": (
        "MultiarmedBanditEnv",
        "popgym.envs.multiarmed_bandit",
        "MultiarmedBanditEasy",
    ),
    "MineSweeper": ("MineSweeperEnv", "popgym.envs.minesweeper", "MineSweeperEasy"),
    "Battleship": ("BattleshipEnv", "popgym.envs.battleship", "BattleshipEasy"),
    "PositionOnlyCartPole": (
        "PositionOnlyCartPoleEnv",
        "popgym.envs.position_only_cartpole",
        "PositionOnlyCartPoleEasy",
    ),
    "VelocityOnlyCartPole": (
        "VelocityOnlyCartPoleEnv",
        "popgym.envs.velocity_only_cartpole",
        "VelocityOnlyCartPoleEasy",
    ),
    "NoisyPositionOnlyCartPole": (
        "NoisyPositionOnlyCartPoleEnv",
        "popgym.envs.noisy_position_only_cartpole",
        "NoisyPositionOnlyCartPoleEasy",
    ),
    "PositionOnlyPendulum": (
        "PositionOnlyPendulumEnv",
        "popgym.envs.position_only_pendulum",
        "PositionOnlyPendulumEasy",
    ),
    "NoisyPositionOnlyPendulum": (
        "NoisyPositionOnlyPendulumEnv",
        "popgym.envs.noisy_position_only_pendulum",
        "NoisyPositionOnlyPendulumEasy",
    ),
}


def popgym_class(module: str, name: str) -> type:
    """POPGym's env class ``name`` from ``module``."""
    return getattr(__import__(module, fromlist=[name]), name)


def ours_run(name: str, num_envs: int, steps: int):
    """A callable running ``steps`` steps of our port on ``num_envs`` envs; its frame count."""
    env = getattr(ours, PAIRS[name][0])(num_envs, seed=0)

    def run() -> None:
        env.rollout(steps, break_when_any_done=False)

    return run, num_envs * steps


def popgym_run(name: str, num_envs: int, steps: int):
    """A callable running ``steps`` vector steps of POPGym's env; its frame count."""
    cls = popgym_class(*PAIRS[name][1:])
    vec = gym.vector.SyncVectorEnv([cls for _ in range(num_envs)])
    vec.reset(seed=0)
    rng = np.random.default_rng(0)
    space = vec.action_space

    def run() -> None:
        for _ in range(steps):
            space.seed(int(rng.integers(2**31)))
            vec.step(space.sample())

    return run, num_envs * steps


def timed(run, times: list[float]) -> None:
    """Append the seconds of one call of ``run`` to ``times``."""
    start = time.perf_counter()
    run()
    times.append(time.perf_counter() - start)


def measure(name: str, num_envs: int, steps: int, reps: int) -> tuple[float, float]:
    """Median env-steps/s of ours and of POPGym's vector env, timed alternately."""
    mine, mine_frames = ours_run(name, num_envs, steps)
    theirs, their_frames = popgym_run(name, num_envs, max(2, steps // 50))
    mine()
    theirs()
    times: dict[str, list[float]] = {"ours": [], "popgym": []}
    for _ in range(reps):
        timed(mine, times["ours"])
        timed(theirs, times["popgym"])
    return (
        mine_frames / statistics.median(times["ours"]),
        their_frames / statistics.median(times["popgym"]),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated env names (default: all)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    names = [n for n in PAIRS if not args.only or n in args.only.split(",")]
    print(f"| env ({args.envs} envs, Easy) | ours M steps/s | POPGym vector k steps/s | ratio |")
    print("|---|---|---|---|")
    for name in names:
        mine, theirs = measure(name, args.envs, args.steps, args.reps)
        print(f"| {name} | {mine / 1e6:.2f} | {theirs / 1e3:.1f} | {mine / theirs:.0f}x |")


if __name__ == "__main__":
    main()
