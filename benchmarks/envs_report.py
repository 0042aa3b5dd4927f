"""Print env-steps/s of the CartPole workloads and their ratios to the anchors.

Usage::

    PYTHONPATH=. python benchmarks/envs_report.py [--envs 1024,16384] [--steps 200] [--reps 7]
    PYTHONPATH=. python benchmarks/envs_report.py --device cuda --envs 4096,16384,65536

One torch thread; every workload is timed ``reps`` times, interleaved round-robin so that machine
noise hits all of them alike, and the median is reported. Targets: at 1024 envs our
rollout >= gymnasium's numpy ``CartPoleVectorEnv`` and >= 5x the stock TorchRL partial-reset path on
the same kernels, ``Collector`` >= 5M env-steps/s; at 16384 envs our rollout >= 30M env-steps/s.
With ``--device cuda`` only our workloads run (gymnasium is CPU-only) and no targets are checked.

The Collector breakdown splits one step of the ``ours_collector`` Collector at 1024 envs into our
env's ``step_and_maybe_reset`` (timed inside the Collector), the random policy (``RandomPolicy``
on the env's action spec, timed alone) and the rest, the Collector's own code; ``collector_floor``
is the same Collector over an env that costs nothing.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from _envs_setup import DEVICE_WORKLOADS, WORKLOADS, workload_steps

from torchrl_ext.envs import CartPoleEnv

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


def _per_call_us(run: Callable[[], object], calls: int = 300, blocks: int = 7) -> float:
    """Median over ``blocks`` of the mean time of ``calls`` calls, in microseconds."""
    run()
    times = []
    for _ in range(blocks):
        start = time.perf_counter()
        for _ in range(calls):
            run()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times) * 1e6


class _Stopwatch:
    """Wraps a callable and adds up the seconds spent in it."""

    def __init__(self, fn: Callable) -> None:
        self.fn, self.seconds = fn, 0.0

    def __call__(self, *args: object) -> object:
        start = time.perf_counter()
        try:
            return self.fn(*args)
        finally:
            self.seconds += time.perf_counter() - start


def collector_breakdown(num_envs: int, steps: int, batches: int = 3) -> dict[str, float]:
    """Microseconds per step of the ``ours_collector`` Collector, split by who spends them.

    The env's ``step_and_maybe_reset`` is timed inside the Collector (a stopwatch on our env's
    attribute; TorchRL is untouched); the random policy is timed alone on the same carrier; the
    rest of the step is the Collector's own code. The floor is the same Collector over
    ``NullCartPole``.
    """
    from torchrl.collectors import Collector
    from torchrl.modules import RandomPolicy

    env = CartPoleEnv(num_envs, seed=0)
    watch = env.step_and_maybe_reset = _Stopwatch(env.step_and_maybe_reset)
    collector = Collector(env, None, frames_per_batch=num_envs * steps, total_frames=-1)
    data = iter(collector)
    next(data)
    totals = []
    envs = []
    for _ in range(batches):
        watch.seconds = 0.0
        start = time.perf_counter()
        next(data)
        totals.append(time.perf_counter() - start)
        envs.append(watch.seconds)
    carrier = env.reset()
    policy = RandomPolicy(env.full_action_spec)
    policy_us = _per_call_us(lambda: policy(carrier))
    total = statistics.median(totals) / steps * 1e6
    env_us = statistics.median(envs) / steps * 1e6
    floor = WORKLOADS["collector_floor"][0](num_envs, steps)
    floor_us = _per_call_us(floor, calls=1, blocks=batches) / steps
    return {
        "total (ours_collector)": total,
        "random policy": policy_us,
        "our env (step_and_maybe_reset)": env_us,
        "Collector's own code": total - policy_us - env_us,
        "floor (collector_floor)": floor_us,
        "5M env-steps/s budget": num_envs / 5e6 * 1e6,
    }


def _row(label: str, value: float, target: float | None, unit: str) -> str:
    verdict = "" if target is None else ("ok" if value >= target else "MISSED")
    goal = "" if target is None else f">= {target:g}{unit}"
    return f"  {label:<44} {value:>10.2f}{unit:<2} {goal:<10} {verdict}"


def report(results: dict[int, dict[str, float]], device: str = "cpu", steps: int = 200) -> None:
    """Print the throughput table and the target ratios."""
    for n, res in results.items():
        print(f"\n{n} envs on {device} (env-steps/s, median):")
        for name, rate in sorted(res.items(), key=lambda kv: -kv[1]):
            print(f"  {name:<22} {rate / 1e6:>9.2f} M")
    if device != "cpu":
        return
    if 1024 in results:
        print("\n1024 envs, one Collector step (us, random policy, default Collector):")
        for name, us in collector_breakdown(1024, steps).items():
            print(f"  {name:<32} {us:>7.1f}")
    print("\nTargets:")
    if 1024 in results:
        r = results[1024]
        print(_row("1024: ours_rollout / gym_vector", r["ours_rollout"] / r["gym_vector"], 1, "x"))
        ratio = r["ours_rollout"] / r["stock_rollout"]
        print(_row("1024: ours_rollout / stock_rollout", ratio, 5, "x"))
        print(_row("1024: ours_collector (M env-steps/s)", r["ours_collector"] / 1e6, 5, "M"))
        tuned = r["ours_collector_tuned"] / 1e6
        print(_row("1024: ours_collector_tuned (M env-steps/s)", tuned, 5, "M"))
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
    results = {n: measure(n, args.steps, args.reps, args.device) for n in sizes}
    report(results, args.device, args.steps)


if __name__ == "__main__":
    main()
