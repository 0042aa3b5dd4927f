"""Where a recurrent PPO collection step goes: env, policy and TorchRL's collector, per frame.

Usage::

    PYTHONPATH=. python benchmarks/collection_report.py [--envs 16 1024] [--batches 4]
        [--reps 5] [--processes 3]

One torch thread. Each variant runs TorchRL's ``Collector`` over the PPO demo's env
(``examples/ppo_cartpole.py``: partially observable CartPole with the demo's transforms) for
``--batches`` batches of 32 steps:

* ``env + collector``: random actions (the collector's own ``rand_action``), no policy;
* ``torchrl_ext LSTMModule``: the demo's collection policy (actor and critic memories) built
  from :class:`torchrl_ext.modules.LSTMModule`;
* ``torchrl LSTMModule``: the same policy built from TorchRL's ``LSTMModule``.

Every variant is timed ``--reps`` times, in turn, after a warm-up batch, in each of
``--processes`` fresh processes. The policy's share of a step is the variant's time per frame
minus the random-action variant's, in the same repetition. The table gives medians, with the
lowest and highest value over all repetitions of all processes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from unittest import mock

import _examples_path  # noqa: F401  (puts examples/ on sys.path)
import torch

VARIANTS = ("env + collector", "torchrl_ext LSTMModule", "torchrl LSTMModule")
STEPS = 32


def make_collector(variant: str, num_envs: int):
    """A collector of ``num_envs`` demo envs, with the variant's policy."""
    import ppo_cartpole
    from torchrl.collectors import Collector
    from torchrl.modules import LSTMModule as TorchRLLSTM

    from torchrl_ext.modules import LSTMModule as OurLSTM

    args = ppo_cartpole.Args(seed=0)
    memory = TorchRLLSTM if variant == "torchrl LSTMModule" else OurLSTM
    with mock.patch.object(ppo_cartpole, "LSTMModule", memory):
        actor, critic = ppo_cartpole.make_agent(args)
        primers = ppo_cartpole.memories(actor, critic)
        env = ppo_cartpole.make_env(args, num_envs, 0, primers, torch.device("cpu"))
        policy = ppo_cartpole.collection_policy(actor, critic)
    if variant == "env + collector":
        policy = None  # the collector's own rand_action
    return Collector(env, policy, frames_per_batch=num_envs * STEPS, total_frames=-1)


def measure(num_envs: int, batches: int, reps: int) -> dict[str, list[float]]:
    """Microseconds per frame of every variant, ``reps`` times each, in turn (this process)."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    iterators = {v: iter(make_collector(v, num_envs)) for v in VARIANTS}
    for it in iterators.values():
        next(it)  # warm-up: first launches, allocations
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with torch.no_grad():
        for _ in range(reps):
            for variant, it in iterators.items():
                start = time.perf_counter()
                for _ in range(batches):
                    next(it)
                frames = batches * STEPS * num_envs
                times[variant].append(1e6 * (time.perf_counter() - start) / frames)
    return times


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} [{min(values):.1f}–{max(values):.1f}]"


def table(per_envs: dict[int, dict[str, list[float]]]) -> str:
    """Per env count: each variant's µs per frame and the policy's share of it."""
    lines = [
        "| envs | variant | µs per frame | policy's µs per frame |",
        "|---|---|---|---|",
    ]
    for num_envs, times in per_envs.items():
        base = times["env + collector"]
        for variant in VARIANTS:
            share = "—"
            if variant != "env + collector":
                share = spread([t - b for t, b in zip(times[variant], base, strict=True)])
            lines.append(f"| {num_envs} | {variant} | {spread(times[variant])} | {share} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[16, 1024])
    parser.add_argument("--batches", type=int, default=4, help="batches of 32 steps per timing")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is not None:
        print(json.dumps(measure(args.worker, args.batches, args.reps)))
        return ""
    per_envs: dict[int, dict[str, list[float]]] = {}
    for _ in range(args.processes):
        for num_envs in args.envs:
            cmd = [sys.executable, __file__, "--worker", str(num_envs)]
            cmd += ["--batches", str(args.batches), "--reps", str(args.reps)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            result = json.loads(out.strip().splitlines()[-1])
            for variant, values in result.items():
                per_envs.setdefault(num_envs, {}).setdefault(variant, []).extend(values)
    text = table(per_envs)
    print(text)
    return text


if __name__ == "__main__":
    main()
