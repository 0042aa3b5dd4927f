"""Shared set-up of the recurrent-module benchmarks: the rows and the timed training passes.

One training pass (forward and backward of ``output.sum()``) of an LSTM in recurrent mode over
``[B, T]`` rows with episode starts at a given rate per step:

* ``ours``: :class:`torchrl_ext.modules.LSTMModule` on the TensorDict, stored states included;
* ``nn_lstm_floor``: one ``torch.nn.LSTM`` pass over the whole rows, without resets, on plain
  tensors: the floor no module that resets states can beat;
* ``torchrl_pad``: TorchRL's ``LSTMModule`` (its default ``pad`` backend) on the same TensorDict.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import nn
from torchrl import modules as torchrl_modules
from torchrl.modules import set_recurrent_mode

from torchrl_ext.modules import LSTMModule

INPUT, HIDDEN, RATE = 16, 64, 0.05


def rows(n_rows: int, steps: int, hidden: int, rate: float, seed: int = 0) -> TensorDict:
    """Inputs, ``is_init`` (each row's first step, then starts at ``rate`` per step) and stored
    states, as a collector leaves them."""
    gen = torch.Generator().manual_seed(seed)
    is_init = torch.rand(n_rows, steps, 1, generator=gen) < rate
    is_init[:, 0] = True
    return TensorDict(
        {
            "obs": torch.randn(n_rows, steps, INPUT, generator=gen),
            "is_init": is_init,
            "recurrent_state_h": torch.randn(n_rows, steps, 1, hidden, generator=gen),
            "recurrent_state_c": torch.randn(n_rows, steps, 1, hidden, generator=gen),
        },
        [n_rows, steps],
    )


def cases(n_rows: int, steps: int, hidden: int, rate: float) -> dict:
    """Zero-argument callables (forward + backward) on the same data and weights."""
    torch.manual_seed(0)
    ours = LSTMModule(input_size=INPUT, hidden_size=hidden, in_key="obs", out_key="features")
    theirs = torchrl_modules.LSTMModule(
        input_size=INPUT, hidden_size=hidden, in_key="obs", out_key="features"
    )
    theirs.load_state_dict(ours.state_dict())
    floor_layer = nn.LSTM(INPUT, hidden, batch_first=True)
    floor_layer.load_state_dict(ours.lstm.state_dict())
    data = rows(n_rows, steps, hidden, rate)
    x = data["obs"].clone().requires_grad_()

    def module_pass(module):
        def run():
            with set_recurrent_mode(True):
                out = module(data.copy())
            out["features"].sum().backward()

        return run

    def floor():
        out, _ = floor_layer(x)
        out.sum().backward()

    return {"ours": module_pass(ours), "nn_lstm_floor": floor, "torchrl_pad": module_pass(theirs)}
