"""Every POPGym port next to the same POPGym env in gymnasium's ``SyncVectorEnv``.

``ours``: ``rollout(T, break_when_any_done=False)`` on ``N`` envs (one kernel for all steps);
``popgym``: ``T`` vector steps of ``N`` copies of POPGym's Easy env with random actions. Sizes are
small by default (CI runs this once with ``--benchmark-disable``); set ``TORCHRL_EXT_BENCH_ENVS``
and ``TORCHRL_EXT_BENCH_STEPS`` for real figures, or run ``python benchmarks/popgym_report.py``
for the ratio table at 1,024 envs.
"""

from __future__ import annotations

import os

import pytest
from popgym_report import PAIRS, ours_run, popgym_run

ENVS = int(os.environ.get("TORCHRL_EXT_BENCH_ENVS", "8"))
STEPS = int(os.environ.get("TORCHRL_EXT_BENCH_STEPS", "4"))


@pytest.mark.parametrize("name", list(PAIRS))
def test_ours(benchmark, name):
    run, _ = ours_run(name, ENVS, STEPS)
    run()
    benchmark(run)


@pytest.mark.parametrize("name", list(PAIRS))
def test_popgym(benchmark, name):
    run, _ = popgym_run(name, ENVS, STEPS)
    run()
    benchmark(run)
