"""Env-steps/s of every POPGym port against the same POPGym env in gymnasium's vector env.

Usage::

    PYTHONPATH=. python benchmarks/popgym_report.py [--envs 1024] [--steps 200] [--reps 5]
        [--processes 3] [--only RepeatFirst,Battleship]

One torch thread. For each env (Easy preset), ours runs ``rollout(steps,
break_when_any_done=False)`` on ``--envs`` envs (one kernel for all steps, random actions drawn
up front); POPGym's runs ``gymnasium.vector.SyncVectorEnv`` of ``--envs`` copies for a few vector
steps with random actions (it is slow: a few steps give a stable rate). Each pair is timed
``reps`` times, alternating, after a warm-up, in each of ``--processes`` fresh processes. Every
alternating pair gives one ratio; the table gives the medians of the rates and the median ratio
with its lowest and highest value over all pairs of all processes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
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


def measure(name: str, num_envs: int, steps: int, reps: int) -> list[tuple[float, float]]:
    """``reps`` alternating pairs of env-steps/s: (ours, POPGym's vector env)."""
    mine, mine_frames = ours_run(name, num_envs, steps)
    theirs, their_frames = popgym_run(name, num_envs, max(2, steps // 50))
    mine()
    theirs()
    pairs = []
    for _ in range(reps):
        ours_t, theirs_t = [], []
        timed(mine, ours_t)
        timed(theirs, theirs_t)
        pairs.append((mine_frames / ours_t[0], their_frames / theirs_t[0]))
    return pairs


def child(args: argparse.Namespace, names: list[str]) -> None:
    """Measure every env in this process; print one JSON line of rate pairs per env."""
    torch.set_num_threads(1)
    for name in names:
        print(json.dumps({"env": name, "pairs": measure(name, args.envs, args.steps, args.reps)}))


def run_processes(args: argparse.Namespace, names: list[str]) -> dict[str, list]:
    """Rate pairs of every env, gathered from ``args.processes`` fresh processes."""
    command = [sys.executable, __file__, "--child", "--only", ",".join(names)]
    command += ["--envs", str(args.envs), "--steps", str(args.steps), "--reps", str(args.reps)]
    pairs: dict[str, list] = {name: [] for name in names}
    for _ in range(args.processes):
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("{"):
                row = json.loads(line)
                pairs[row["env"]] += row["pairs"]
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated env names (default: all)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    names = [n for n in PAIRS if not args.only or n in args.only.split(",")]
    if args.child:
        child(args, names)
        return
    pairs = run_processes(args, names)
    print(
        f"| env ({args.envs} envs, Easy) | ours M steps/s | POPGym vector k steps/s "
        "| ratio, median | ratio, lowest-highest |"
    )
    print("|---|---|---|---|---|")
    for name in names:
        mine = statistics.median(p[0] for p in pairs[name])
        theirs = statistics.median(p[1] for p in pairs[name])
        ratios = [p[0] / p[1] for p in pairs[name]]
        print(
            f"| {name} | {mine / 1e6:.2f} | {theirs / 1e3:.1f} | "
            f"{statistics.median(ratios):.0f}x | {min(ratios):.0f}-{max(ratios):.0f}x |"
        )
    print(f"({args.processes} processes x {args.reps} alternating pairs per env)")


if __name__ == "__main__":
    main()
