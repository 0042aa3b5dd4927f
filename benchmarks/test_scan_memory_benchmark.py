"""FFMModule against LSTMModule, side by side (pytest-benchmark).

One training pass (forward and backward of ``output.sum()``) in recurrent mode over ``[B, T]``
rows with episode starts at 0.05 per step and stored states, for
:class:`torchrl_ext.modules.FFMModule` (``m = 32``, ``c = 4``) and
:class:`torchrl_ext.modules.LSTMModule` at the same hidden size.

Sizes are small by default so CI can smoke-run the file with ``--benchmark-disable``; set
``TORCHRL_EXT_BENCH_FULL=1`` for ``[64, 1024]`` rows and hidden size 256 (POPGym's horizon
and memory width), or run ``benchmarks/scan_memory_report.py`` for the ratio over fresh
processes. One torch thread throughout.
"""

from __future__ import annotations

import os

import pytest
from _scan_memory_setup import RATE, cases

FULL = os.environ.get("TORCHRL_EXT_BENCH_FULL", "0") == "1"
SIZE, HIDDEN = ((64, 1024), 256) if FULL else ((8, 32), 64)

CASES = cases(*SIZE, HIDDEN, RATE)


@pytest.mark.parametrize("name", list(CASES))
def test_scan_memory(benchmark, name):
    benchmark.group = f"H{HIDDEN} forward+backward {SIZE[0]}x{SIZE[1]}, {RATE} starts/step"
    benchmark(CASES[name])
