"""All layers over ``[B, T]`` rows cut at episode starts, as one packed-sequence ``torch.nn`` call.

The path for tensors the compiled CPU kernels do not take (CUDA, where cuDNN runs a
:class:`~torch.nn.utils.rnn.PackedSequence` in one call, and any other device or dtype). Each
segment (a row's steps from one start to the next) becomes one sequence of the pack, starting
from the stored state at its first step, so the layer's final states are each segment's states
after its last step, for every layer, as the module's ``("next", state)`` outputs need them.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


def run_packed(
    layer: nn.LSTM | nn.GRU,
    x: torch.Tensor,
    states: tuple[torch.Tensor, ...] | None,
    starts: torch.Tensor,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """``(output, next_states)`` of ``layer`` over rows cut where ``starts`` is set.

    Args:
        layer (nn.LSTM or nn.GRU): a unidirectional, batch-first layer without projections.
        x (torch.Tensor): ``[B, T, input_size]`` inputs.
        states (tuple of torch.Tensor, optional): the stored states, each
            ``[B, T, num_layers, H]``, read at the segments' first steps; ``None`` for zeros.
        starts (torch.Tensor): bool ``[B, T]``, set at each row's first step and episode starts.

    Returns:
        The last layer's output ``[B, T, H]``, and per state the ``[B, T, num_layers, H]`` states
        after each segment's last step, zeros at the other steps.
    """
    n_rows, n_steps = starts.shape
    total = n_rows * n_steps
    first = torch.nonzero(starts.reshape(-1)).squeeze(1)
    last = torch.cat([first[1:], first.new_full((1,), total)]) - 1
    lengths = last - first + 1
    lengths_cpu = lengths.cpu()
    longest = int(lengths_cpu.max())
    offsets = torch.arange(longest, device=x.device)
    valid = offsets < lengths.unsqueeze(1)
    gather = (first.unsqueeze(1) + offsets).clamp(max=total - 1)
    padded = x.reshape(total, -1)[gather]
    packed = pack_padded_sequence(padded, lengths_cpu, batch_first=True, enforce_sorted=False)
    hx = None
    if states is not None:
        hx = tuple(s.reshape(total, *s.shape[-2:])[first].transpose(0, 1) for s in states)
        hx = hx if len(hx) > 1 else hx[0]
    out, finals = layer(packed, hx)
    out, _ = pad_packed_sequence(out, batch_first=True, total_length=longest)
    output = out[valid].view(n_rows, n_steps, -1)
    finals = finals if isinstance(finals, tuple) else (finals,)
    next_states = [
        final.new_zeros(total, *final.shape[::2])
        .index_copy(0, last, final.transpose(0, 1))
        .view(n_rows, n_steps, *final.shape[::2])
        for final in finals
    ]
    return output, next_states
