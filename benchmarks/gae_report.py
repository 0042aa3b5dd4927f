"""Prints the ratio table for issue 3's speed targets (1 torch thread, medians, same run).

Usage::

    PYTHONPATH=. python benchmarks/gae_report.py [--rounds 15]

Cases are timed round-robin (one call of each per round, in an order shuffled every round) so
that load from other processes hits all of them alike; the table shows per-case medians and
the ratios the issue targets.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from test_gae_benchmark import (
    GAMMA,
    HIDDEN,
    LMBDA,
    plain_cases,
    plain_rollout,
    recurrent_cases,
    settle_allocator,
)

from torchrl_ext.objectives import _gae_cpu

PLAIN_SIZE = (4096, 256)
RECURRENT_SIZE = (256, 128)
#: Bytes one plain-GAE call must move at 4096 x 256 float32: reward, value and next value in,
#: two bool flags in, advantage and value target out.
PLAIN_BYTES = PLAIN_SIZE[0] * PLAIN_SIZE[1] * (3 * 4 + 2 + 2 * 4)


def round_robin(cases: dict, rounds: int, seed: int = 0) -> dict[str, float]:
    """Median seconds per case, timing one call of each case per round after a warm-up.

    The order is shuffled every round (seeded): in a fixed order each case would always run
    right after the same other one, with the caches in the state that one leaves (after
    ``ours``, torchrl's call finds the same rollout already in the cache; after the memory
    copy, ``ours`` finds it evicted).
    """
    times = {name: [] for name in cases}
    for fn in cases.values():
        fn()
    order, rng = list(cases), random.Random(seed)
    for _ in range(rounds):
        rng.shuffle(order)
        for name in order:
            start = time.perf_counter()
            cases[name]()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def copy_floor(n_bytes: int) -> dict:
    """A memory-bandwidth floor measured in the same run: copying ``n_bytes / 2`` bytes."""
    src = torch.empty(n_bytes // 8, dtype=torch.float32).uniform_()
    dst = torch.empty_like(src)
    return {"memcpy_same_traffic": lambda: dst.copy_(src)}


def warm_kernel(n_envs: int, steps: int) -> dict:
    """The CPU scan kernel alone, writing into preallocated (already touched) outputs.

    The gap between this and a full call is the Python side (reading and checking the
    tensordict, deriving ``is_init``, writing the outputs) and allocating the outputs.
    """
    td = plain_rollout(n_envs, steps)
    keys = [("next", "reward"), "state_value", ("next", "state_value")]
    flags = [("next", "terminated"), ("next", "done")]
    inputs = tuple(td[key][..., 0].numpy() for key in keys + flags)
    coefs = (np.float32(GAMMA), np.float32(GAMMA * LMBDA))
    outputs = (np.zeros_like(inputs[0]), np.zeros_like(inputs[0]))
    last_done = np.zeros(n_envs, dtype=np.bool_)

    def launch():
        _gae_cpu._scan_rows(inputs, coefs, outputs, last_done)

    return {"ours_kernel_warm_outputs": launch}


def page_faults(fn, calls: int = 3) -> float:
    """Minor page faults per call of ``fn`` (fresh pages the kernel had to map)."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(calls):
        fn()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(1)
    settle_allocator()

    plain = round_robin(
        {**plain_cases(*PLAIN_SIZE), **warm_kernel(*PLAIN_SIZE), **copy_floor(PLAIN_BYTES)},
        args.rounds,
    )
    cases = recurrent_cases(*RECURRENT_SIZE)
    slow = {"torchrl_gae_deactivate_vmap": cases.pop("torchrl_gae_deactivate_vmap")}
    # ours and the raw LSTM alternate tightly; torchrl's slow call is timed on its own
    recurrent = round_robin(cases, args.rounds * 2)
    faults = {name: page_faults(fn) for name, fn in cases.items()}
    recurrent.update(round_robin(slow, max(3, args.rounds // 3)))

    ms = {k: v * 1e3 for k, v in {**plain, **recurrent}.items()}
    print(f"torch {torch.__version__}, 1 thread, medians of round-robin timings (ms)\n")
    print(f"## Plain GAE {PLAIN_SIZE[0]}x{PLAIN_SIZE[1]} float32, env-major input")
    for name in plain:
        print(f"  {name:28s} {plain[name] * 1e3:9.2f} ms")
    print(
        f"  torchrl GAE / ours            {plain['torchrl_gae'] / plain['ours']:9.1f}x"
        "  (target >= 8)"
    )
    print(
        f"  SB3 numpy / ours              {plain['sb3_numpy_time_major'] / plain['ours']:9.2f}x"
        "  (target >= 1)"
    )
    floor = plain["memcpy_same_traffic"]
    print(
        f"  ours / memcpy floor           {plain['ours'] / floor:9.2f}x"
        f"  ({PLAIN_BYTES / 1e6:.0f} MB of traffic)"
    )
    print(f"  kernel (warm outputs) / floor {plain['ours_kernel_warm_outputs'] / floor:9.2f}x")
    print(
        f"\n## Recurrent recompute, LSTM hidden {HIDDEN}, {RECURRENT_SIZE[0]}x{RECURRENT_SIZE[1]}"
    )
    for name in recurrent:
        fault_note = f"  ({faults[name]:.0f} page faults per call)" if name in faults else ""
        print(f"  {name:28s} {ms[name]:9.2f} ms{fault_note}")
    raw = recurrent["raw_nn_lstm_T_plus_1"]
    print(f"  ours / raw nn.LSTM [N, T+1]   {recurrent['ours'] / raw:9.2f}x  (target <= 1.3)")
    print(
        f"  torchrl GAE(deactivate_vmap) / ours "
        f"{recurrent['torchrl_gae_deactivate_vmap'] / recurrent['ours']:6.1f}x  (target >= 4)"
    )


if __name__ == "__main__":
    main()
