"""The full CourseEnv RL step, eager vs captured, through the kernels and through TorchRL.

CI runs this file once with ``--benchmark-disable`` at a small size; set
``TORCHRL_EXT_BENCH_COURSE_ENVS=1024,16384`` for the full sizes, or run
``python benchmarks/course_env_report.py`` for the table.
"""

from __future__ import annotations

import os

import pytest
import torch
import warp as wp
from course_env_report import MODES, make_step

wp.config.log_level = wp.LOG_WARNING

ENVS = [int(n) for n in os.environ.get("TORCHRL_EXT_BENCH_COURSE_ENVS", "256").split(",")]


@pytest.mark.parametrize("num_envs", ENVS)
@pytest.mark.parametrize("mode", MODES)
def test_course_env_step(benchmark, mode, num_envs):
    step, new_actions, env = make_step(num_envs, mode)
    benchmark.group = f"CourseEnv step N={num_envs}"

    def setup():
        new_actions()
        return (), {}

    steps_before = int(env.buffers["steps"].numpy().sum())
    benchmark.pedantic(step, setup=setup, rounds=20, warmup_rounds=1)
    # every step advances or restarts each env's step counter: something was stepped
    assert int(env.buffers["steps"].numpy().sum()) != steps_before
    assert bool(torch.isfinite(wp.to_torch(env.buffers["reward"])).all())
