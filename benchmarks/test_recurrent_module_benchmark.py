"""The whole-row LSTMModule against its anchors, side by side (pytest-benchmark).

One training pass (forward and backward of ``output.sum()``) of an LSTM in recurrent mode over
``[B, T]`` rows with episode starts at a given rate per step:

* ``ours``: :class:`torchrl_ext.modules.LSTMModule` on the TensorDict, stored states included;
* ``nn_lstm_floor``: one ``torch.nn.LSTM`` pass over the whole rows, without resets, on plain
  tensors: the floor no module that resets states can beat;
* ``torchrl_pad``: TorchRL's ``LSTMModule`` (its default ``pad`` backend) on the same TensorDict.

Sizes are small by default so CI can smoke-run the file with ``--benchmark-disable``; set
``TORCHRL_EXT_BENCH_FULL=1`` for ``[64, 128]`` rows, or run
``benchmarks/recurrent_module_report.py`` for the ratio table over sizes, widths and rates.
One torch thread throughout.
"""

from __future__ import annotations

import os

import pytest
from _recurrent_setup import HIDDEN, RATE, cases

FULL = os.environ.get("TORCHRL_EXT_BENCH_FULL", "0") == "1"
SIZE = (64, 128) if FULL else (8, 32)

CASES = cases(*SIZE, HIDDEN, RATE)


@pytest.mark.parametrize("name", list(CASES))
def test_recurrent_module(benchmark, name):
    benchmark.group = f"LSTM{HIDDEN} forward+backward {SIZE[0]}x{SIZE[1]}, {RATE} starts/step"
    benchmark(CASES[name])
