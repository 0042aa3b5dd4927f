"""A slow, obvious recurrent pass written with ``torch.nn`` cells, used as the test oracle.

It follows TorchRL's recurrent-mode contract literally, one row and one step at a time: a row
starts from its stored state at ``t = 0``, and at every step where ``is_init`` is set the state
is replaced by the stored state of that step (zeros when there are none). The ``("next", state)``
outputs hold the state after a step that ends a segment (the row's last step, or the step before
an ``is_init``), zeros elsewhere. It shares no code with the package.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call


def cell_params(layer: nn.Module, index: int) -> dict[str, torch.Tensor]:
    """The parameters of layer ``index`` under a cell's names (the same tensors, for autograd)."""
    params = {}
    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        value = getattr(layer, f"{name}_l{index}", None)
        if value is not None:
            params[name] = value
    return params


def reference_rows(
    layer: nn.Module,
    x: torch.Tensor,
    states: list[torch.Tensor] | None,
    is_init: torch.Tensor,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """``(output [B, T, H], next states [B, T, L, H] each)`` of an ``nn.LSTM`` or ``nn.GRU``.

    ``x`` is ``[B, T, I]``, ``states`` a list of ``[B, T, L, H]`` tensors (``h`` then ``c``) or
    ``None``, ``is_init`` bool ``[B, T]``.
    """
    is_lstm = isinstance(layer, nn.LSTM)
    size, n_layers = layer.hidden_size, layer.num_layers
    cell = (nn.LSTMCell if is_lstm else nn.GRUCell)(
        layer.input_size, size, bias=layer.bias, dtype=x.dtype
    )
    n_states = 2 if is_lstm else 1
    n_rows, n_steps = is_init.shape
    rows, next_rows = [], [[] for _ in range(n_states)]
    for b in range(n_rows):
        carried = None
        outputs, nexts = [], [[] for _ in range(n_states)]
        for t in range(n_steps):
            if t == 0 or bool(is_init[b, t]):
                carried = [
                    [
                        states[s][b, t, k] if states is not None else x.new_zeros(size)
                        for s in range(n_states)
                    ]
                    for k in range(n_layers)
                ]
            value = x[b, t]
            for k in range(n_layers):
                cell_in = value.unsqueeze(0)
                if is_lstm:
                    hx = (carried[k][0].unsqueeze(0), carried[k][1].unsqueeze(0))
                    h, c = functional_call(cell, cell_params(layer, k), (cell_in, hx))
                    carried[k] = [h[0], c[0]]
                else:
                    h = functional_call(cell, cell_params(layer, k), (cell_in, carried[k][0][None]))
                    carried[k] = [h[0]]
                value = carried[k][0]
            outputs.append(value)
            ends = t == n_steps - 1 or bool(is_init[b, t + 1])
            for s in range(n_states):
                per_layer = [carried[k][s] if ends else carried[k][s] * 0 for k in range(n_layers)]
                nexts[s].append(torch.stack(per_layer))
        rows.append(torch.stack(outputs))
        for s in range(n_states):
            next_rows[s].append(torch.stack(nexts[s]))
    return torch.stack(rows), [torch.stack(n) for n in next_rows]
