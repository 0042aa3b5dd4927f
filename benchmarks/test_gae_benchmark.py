"""RecurrentGAE against its anchors, side by side (pytest-benchmark).

Plain GAE (no value network, env-major ``[N, T]`` input as torchrl collectors produce):
ours vs torchrl's ``GAE`` with its defaults vs an SB3-style numpy loop on time-major arrays.
Recurrent recompute (LSTM critic): ours vs one raw ``torch.nn.LSTM`` pass over ``[N, T + 1]``
vs torchrl's ``GAE(deactivate_vmap=True)``.

Sizes are small by default so CI can smoke-run the file with ``--benchmark-disable``; set
``TORCHRL_EXT_BENCH_FULL=1`` for the full sizes (4096 x 256 plain, 256 x 128 recurrent),
or run ``benchmarks/gae_report.py`` for the ratio table. One torch thread throughout; the C
library's allocator keeps its default settings, as in a user's process.
"""

from __future__ import annotations

import os

import pytest
from _gae_setup import HIDDEN, plain_cases, recurrent_cases

FULL = os.environ.get("TORCHRL_EXT_BENCH_FULL", "0") == "1"
PLAIN_SIZE = (4096, 256) if FULL else (256, 64)
RECURRENT_SIZE = (256, 128) if FULL else (16, 16)

PLAIN = plain_cases(*PLAIN_SIZE)
RECURRENT = recurrent_cases(*RECURRENT_SIZE)


@pytest.mark.parametrize("name", list(PLAIN))
def test_plain_gae(benchmark, name):
    benchmark.group = f"plain GAE {PLAIN_SIZE[0]}x{PLAIN_SIZE[1]}"
    benchmark(PLAIN[name])


@pytest.mark.parametrize("name", list(RECURRENT))
def test_recurrent_recompute(benchmark, name):
    benchmark.group = f"recurrent recompute LSTM{HIDDEN} {RECURRENT_SIZE[0]}x{RECURRENT_SIZE[1]}"
    benchmark(RECURRENT[name])
