"""Shared set-up of the scan-memory benchmarks: the rows and the timed training passes.

One training pass (forward and backward of ``output.sum()``) in recurrent mode over ``[B, T]``
rows with episode starts at a given rate per step, stored states included, as a collector
leaves them:

* ``ffm``: :class:`torchrl_ext.modules.FFMModule` (the paper's ``m = 32``, ``c = 4``);
* ``lstm``: :class:`torchrl_ext.modules.LSTMModule`, at the same hidden size.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from tensordict import TensorDict
from torchrl.modules import set_recurrent_mode

from torchrl_ext.modules import FFMModule, LSTMModule

INPUT, RATE = 16, 0.05


def rows(n_rows: int, steps: int, hidden: int, rate: float, seed: int = 0) -> TensorDict:
    """Inputs, ``is_init`` (each row's first step, then starts at ``rate`` per step) and the
    stored states of FFM, LSTM and GRU."""
    gen = torch.Generator().manual_seed(seed)
    is_init = torch.rand(n_rows, steps, 1, generator=gen) < rate
    is_init[:, 0] = True
    return TensorDict(
        {
            "obs": torch.randn(n_rows, steps, INPUT, generator=gen),
            "is_init": is_init,
            "recurrent_state_h": torch.randn(n_rows, steps, 1, hidden, generator=gen),
            "recurrent_state_c": torch.randn(n_rows, steps, 1, hidden, generator=gen),
            "recurrent_state": torch.randn(n_rows, steps, 1, hidden, generator=gen),
            "recurrent_state_ffm": torch.randn(n_rows, steps, 32, 4, 2, generator=gen),
        },
        [n_rows, steps],
    )


def cases(n_rows: int, steps: int, hidden: int, rate: float = RATE) -> dict[str, Callable]:
    """Zero-argument callables (forward + backward) on the same rows."""
    torch.manual_seed(0)
    ffm = FFMModule(input_size=INPUT, hidden_size=hidden, in_key="obs", out_key="features")
    lstm = LSTMModule(input_size=INPUT, hidden_size=hidden, in_key="obs", out_key="features")
    data = rows(n_rows, steps, hidden, rate)

    def training_pass(module):
        def run():
            with set_recurrent_mode(True):
                out = module(data.copy())
            out["features"].sum().backward()

        return run

    return {"ffm": training_pass(ffm), "lstm": training_pass(lstm)}
