"""Random-policy CartPole stepping: our Warp envs next to TorchRL's generic path and gymnasium.

The workloads (``_envs_setup.WORKLOADS``, described there) each step ``num_envs`` CartPoles for
``steps`` steps with random actions and auto-reset.

Sizes are small by default (CI runs this once with ``--benchmark-disable``); set
``TORCHRL_EXT_BENCH_ENVS`` (e.g. ``1024,16384``) and ``TORCHRL_EXT_BENCH_STEPS`` for real figures,
or run ``python benchmarks/envs_report.py`` for the ratio table.
"""

from __future__ import annotations

import os

import pytest
from _envs_setup import WORKLOADS, workload_steps

ENVS = [int(x) for x in os.environ.get("TORCHRL_EXT_BENCH_ENVS", "64").split(",")]
STEPS = int(os.environ.get("TORCHRL_EXT_BENCH_STEPS", "20"))


@pytest.mark.parametrize("num_envs", ENVS)
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_cartpole_stepping(benchmark, name, num_envs):
    steps = workload_steps(name, STEPS)
    run = WORKLOADS[name][0](num_envs, steps)
    benchmark.group = f"cartpole-{num_envs}"
    benchmark.extra_info["env_steps"] = num_envs * steps
    benchmark(run)
