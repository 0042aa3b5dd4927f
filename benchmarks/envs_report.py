"""Print env-steps/s of the CartPole workloads and the ratios that issue 4 targets.

Usage::

    PYTHONPATH=. python benchmarks/envs_report.py [--envs 1024,16384] [--steps 200] [--reps 7]
    PYTHONPATH=. python benchmarks/envs_report.py --device cuda --envs 4096,16384,65536

One torch thread; every workload is timed ``reps`` times, interleaved round-robin so that machine
noise hits all of them alike, and the median is reported. Targets (issue 4): at 1024 envs our
rollout >= gymnasium's numpy ``CartPoleVectorEnv`` and >= 5x the stock TorchRL partial-reset path on
the same kernels, ``Collector`` >= 5M env-steps/s; at 16384 envs our rollout >= 30M env-steps/s.
With ``--device cuda`` only our workloads run (gymnasium is CPU-only) and no targets are checked.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_envs_benchmark import DEVICE_WORKLOADS, WORKLOADS, workload_steps

SKIP_AT_LARGE = {"gym_sync"}


def measure(num_envs: int, steps: int, reps: int, device: str = "cpu") -> dict[str, float]:
    """Median env-steps/s of every workload at ``num_envs`` envs."""
    names = [n for n in WORKLOADS if not (num_envs > 4096 and n in SKIP_AT_LARGE)]
    if device != "cpu":
        names = [n for n in names if n in DEVICE_WORKLOADS]
        runs = {n: WORKLOADS[n][0](num_envs, workload_steps(n, steps), device) for n in names}
    else:
        runs = {n: WORKLOADS[n][0](num_envs, workload_steps(n, steps)) for n in names}
    times: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(reps):
        for name in names:
            start = time.perf_counter()
            runs[name]()
            times[name].append(time.perf_counter() - start)
    return {n: num_envs * workload_steps(n, steps) / statistics.median(times[n]) for n in names}


def _row(label: str, value: float, target: float | None, unit: str) -> str:
    verdict = "" if target is None else ("ok" if value >= target else "MISSED")
    goal = "" if target is None else f">= {target:g}{unit}"
    return f"  {label:<44} {value:>10.2f}{unit:<2} {goal:<10} {verdict}"


def report(results: dict[int, dict[str, float]], device: str = "cpu") -> None:
    """Print the throughput table and the target ratios."""
    for n, res in results.items():
        print(f"\n{n} envs on {device} (env-steps/s, median):")
        for name, rate in sorted(res.items(), key=lambda kv: -kv[1]):
            print(f"  {name:<22} {rate / 1e6:>9.2f} M")
    if device != "cpu":
        return
    print("\nTargets:")
    if 1024 in results:
        r = results[1024]
        print(_row("1024: ours_rollout / gym_vector", r["ours_rollout"] / r["gym_vector"], 1, "x"))
        ratio = r["ours_rollout"] / r["stock_rollout"]
        print(_row("1024: ours_rollout / stock_rollout", ratio, 5, "x"))
        print(_row("1024: ours_collector (M env-steps/s)", r["ours_collector"] / 1e6, 5, "M"))
    if 16384 in results:
        rate = results[16384]["ours_rollout"] / 1e6
        print(_row("16384: ours_rollout (M env-steps/s)", rate, 30, "M"))


def main() -> None:
    """Parse arguments, measure and print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default="1024,16384")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(1)
    sizes = [int(x) for x in args.envs.split(",")]
    report({n: measure(n, args.steps, args.reps, args.device) for n in sizes}, args.device)


if __name__ == "__main__":
    main()
