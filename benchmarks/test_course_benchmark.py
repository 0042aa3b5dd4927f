"""Masked course regeneration: eager and captured, with and without the all-zero skip.

CI runs this file once with ``--benchmark-disable`` at a small size; set
``TORCHRL_EXT_BENCH_COURSE_ENVS=1024,16384`` for the full sizes, or run
``python benchmarks/course_report.py`` for the table.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import warp as wp
from course_report import MODES, make_regeneration, mask_counts, write_mask

wp.config.log_level = wp.LOG_WARNING

ENVS = [int(n) for n in os.environ.get("TORCHRL_EXT_BENCH_COURSE_ENVS", "256").split(",")]
CASES = [(n, k) for n in ENVS for k in mask_counts(n)]


@pytest.mark.parametrize(("num_envs", "k"), CASES)
@pytest.mark.parametrize("mode", MODES)
def test_masked_regeneration(benchmark, mode, num_envs, k):
    run, mask, gen = make_regeneration(num_envs, mode)
    rng = np.random.default_rng(0)
    calls = []
    benchmark.group = f"course regenerate N={num_envs} k={k}"

    def new_mask():
        write_mask(mask, k, rng)
        calls.append(k)
        return (), {}

    benchmark.pedantic(run, setup=new_mask, rounds=20, warmup_rounds=1)
    assert int(gen.views["epoch"].sum()) == sum(calls)
