"""Prints the masked-regeneration cost table (CPU, 1 torch thread, medians).

Usage: ``python benchmarks/course_report.py [--envs 1024,16384] [--rounds 30]``

Each row regenerates k of N courses (k = 0, 1, N/10, N; the k envs are drawn at random per call
from a seeded generator, the mask is rewritten in place outside the timed region). Columns:

- ``eager``: ``regenerate(mask)``, which on the CPU reduces the mask to a flag, reads it on the
  host and skips the rebuild for an all-zero mask;
- ``eager uncond``: ``regenerate(mask, skip_empty=False)``, always launching the rebuild kernels
  (they return early for unmasked envs);
- ``captured``: replay of ``capture_regenerate(mask)``, the rebuild under a conditional op;
- ``captured uncond``: replay of the graph recorded with ``skip_empty=False``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
import warp as wp

from torchrl_ext.envs.course import CourseGenerator

MODES = ("eager", "eager uncond", "captured", "captured uncond")


def mask_counts(num_envs: int) -> list[int]:
    return [0, 1, num_envs // 10, num_envs]


def make_regeneration(
    num_envs: int, mode: str
) -> tuple[Callable[[], None], torch.Tensor, CourseGenerator]:
    """A callable regenerating the envs set in the returned (stable) mask, in ``mode``."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got mode={mode!r}.")
    gen = CourseGenerator(num_envs, seed=0)
    mask = torch.zeros(num_envs, dtype=torch.int32)
    skip_empty = not mode.endswith("uncond")
    if mode.startswith("captured"):
        graph = gen.capture_regenerate(mask, skip_empty=skip_empty)
        return (lambda: wp.capture_launch(graph)), mask, gen
    return (lambda: gen.regenerate(mask, skip_empty=skip_empty)), mask, gen


def write_mask(mask: torch.Tensor, k: int, rng: np.random.Generator) -> None:
    mask.zero_()
    mask[torch.as_tensor(rng.choice(mask.numel(), k, replace=False))] = 1


def measure(num_envs: int, k: int, rounds: int) -> dict[str, float]:
    """Median ms per regeneration of k of ``num_envs`` envs, modes timed in interleaved rounds."""
    cases = {mode: make_regeneration(num_envs, mode) for mode in MODES}
    rng = np.random.default_rng(0)
    times = {mode: [] for mode in MODES}
    for _ in range(rounds):
        for mode, (run, mask, _) in cases.items():
            write_mask(mask, k, rng)
            start = time.perf_counter()
            run()
            times[mode].append(time.perf_counter() - start)
    return {mode: statistics.median(t) * 1e3 for mode, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--envs", default="1024,16384")
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    wp.config.log_level = wp.LOG_WARNING
    print("ms per masked regeneration (median), CPU, 1 torch thread")
    print(f"{'N':>6} {'k':>6} " + " ".join(f"{mode:>16}" for mode in MODES))
    for num_envs in [int(n) for n in args.envs.split(",")]:
        for k in mask_counts(num_envs):
            row = measure(num_envs, k, args.rounds)
            print(f"{num_envs:>6} {k:>6} " + " ".join(f"{row[m]:>16.3f}" for m in MODES))


if __name__ == "__main__":
    main()
