"""One recurrent layer over ``[B, T]`` rows with resets, as autograd functions (CPU, numba).

The numba kernels of :mod:`torchrl_ext.modules._kernels.recurrent_cells` do the serial part of
each direction; everything else is one torch matrix product over all steps: the input projection
before the forward walk, and after the backward walk the input, weight and bias gradients. This
is the CPU path of :mod:`torchrl_ext.modules.recurrent` (the recurrent-module benchmark page
compares it with one ``nn.LSTM`` pass and with the packed-sequence path of
:mod:`torchrl_ext.modules._packed`); the tests check it against a ``torch.nn`` cell loop.
"""

from __future__ import annotations

import torch

from torchrl_ext.modules._kernels import recurrent_cells
from torchrl_ext.modules._products import weight_grad

#: Dtypes the kernels run.
DTYPES = (torch.float32, torch.float64)


def lstm_layer(
    x: torch.Tensor,
    init_h: torch.Tensor | None,
    init_c: torch.Tensor | None,
    starts: torch.Tensor,
    weights: tuple[torch.Tensor, ...],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(h_seq, next_h, next_c)``, each ``[B, T, H]``, of one LSTM layer.

    ``h_seq`` holds the hidden state after every step; ``next_h`` and ``next_c`` the states
    after each segment's last step (a row's last step, or the step before a start), zeros at
    the other steps.

    Args:
        x (torch.Tensor): ``[B, T, input_size]`` inputs.
        init_h (torch.Tensor, optional): ``[B, T, H]`` stored hidden states, read where
            ``starts`` is set; ``None`` for zeros (then ``init_c`` is ``None`` too).
        init_c (torch.Tensor, optional): ``[B, T, H]`` stored cell states, likewise.
        starts (torch.Tensor): bool ``[B, T]``, set at each row's first step and episode starts.
        weights (tuple): ``(w_ih, w_hh, b_ih, b_hh)``, the biases ``None`` for a layer without.
    """
    return _LSTMLayer.apply(x, *_states(x, init_h, init_c), starts, *_with_bias(weights))


def gru_layer(
    x: torch.Tensor,
    init_h: torch.Tensor | None,
    starts: torch.Tensor,
    weights: tuple[torch.Tensor, ...],
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(h_seq, next_h)``, each ``[B, T, H]``, of one GRU layer (see :func:`lstm_layer`).

    Args:
        x (torch.Tensor): ``[B, T, input_size]`` inputs.
        init_h (torch.Tensor, optional): ``[B, T, H]`` stored states, read where ``starts`` is
            set; ``None`` for zeros.
        starts (torch.Tensor): bool ``[B, T]``, set at each row's first step and episode starts.
        weights (tuple): ``(w_ih, w_hh, b_ih, b_hh)``, the biases ``None`` for a layer without.
    """
    (init_h,) = _states(x, init_h)
    return _GRULayer.apply(x, init_h, starts, *_with_bias(weights))


def _states(x: torch.Tensor, *states: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
    """The stored states as contiguous tensors of ``x``'s dtype (empty ones for none)."""
    return tuple(
        x.new_zeros(0, 0, 0) if state is None else state.to(x.dtype).contiguous()
        for state in states
    )


def _with_bias(weights: tuple[torch.Tensor | None, ...]) -> tuple[torch.Tensor, ...]:
    """``(w_ih, w_hh, b_ih, b_hh)`` with zero biases for a layer without them."""
    w_ih, w_hh, b_ih, b_hh = weights
    if b_ih is None:
        b_ih = b_hh = w_hh.new_zeros(w_hh.shape[0])
    return w_ih, w_hh, b_ih, b_hh


def _numpy(x: torch.Tensor):
    """A numpy view of a detached contiguous tensor (a copy only if it is not contiguous)."""
    return x.detach().contiguous().numpy()


def _input_grads(ctx, x, w_ih, d_pre: torch.Tensor) -> tuple:
    """Gradients of ``x @ w_ih.T + b``: ``(dx, d_w_ih, d_b)``, each only if needed."""
    flat = d_pre.view(-1, d_pre.shape[-1])
    dx = (flat @ w_ih).view_as(x) if ctx.needs_input_grad[0] else None
    d_w_ih = weight_grad(flat, x.reshape(flat.shape[0], -1)) if ctx.needs_input_grad[4] else None
    return dx, d_w_ih, flat.sum(0)


class _LSTMLayer(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, init_h, init_c, starts, w_ih, w_hh, b_ih, b_hh):
        n_rows, n_steps = starts.shape
        size = w_hh.shape[1]
        pre = torch.addmm(b_ih + b_hh, x.reshape(n_rows * n_steps, -1), w_ih.t())
        h_seq, c_seq, h_prev, next_h, next_c = (
            x.new_empty(n_rows, n_steps, size) for _ in range(5)
        )
        gates = x.new_empty(n_rows, n_steps, 4 * size)
        has_init = init_h.numel() > 0
        recurrent_cells.lstm_forward(
            pre.view(n_rows, n_steps, -1).numpy(),
            _numpy(w_hh),
            _numpy(init_h),
            _numpy(init_c),
            has_init,
            starts.numpy(),
            h_seq.numpy(),
            c_seq.numpy(),
            gates.numpy(),
            h_prev.numpy(),
            next_h.numpy(),
            next_c.numpy(),
        )
        ctx.save_for_backward(x, init_c, starts, w_ih, w_hh, c_seq, gates, h_prev)
        ctx.has_init = has_init
        return h_seq, next_h, next_c

    @staticmethod
    def backward(ctx, dh_seq, d_next_h, d_next_c):
        x, init_c, starts, w_ih, w_hh, c_seq, gates, h_prev = ctx.saved_tensors
        d_pre = torch.empty_like(gates)
        d_h, d_c = torch.zeros_like(c_seq), torch.zeros_like(c_seq)
        recurrent_cells.lstm_backward(
            _numpy(dh_seq),
            _numpy(d_next_h),
            _numpy(d_next_c),
            _numpy(w_hh),
            _numpy(init_c),
            ctx.has_init,
            starts.numpy(),
            c_seq.numpy(),
            gates.numpy(),
            d_pre.numpy(),
            d_h.numpy(),
            d_c.numpy(),
        )
        dx, d_w_ih, d_b = _input_grads(ctx, x, w_ih, d_pre)
        d_w_hh = weight_grad(d_pre.view(-1, d_pre.shape[-1]), h_prev.view(-1, h_prev.shape[-1]))
        if not ctx.has_init:
            d_h = d_c = None
        return dx, d_h, d_c, None, d_w_ih, d_w_hh, d_b, d_b


class _GRULayer(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, init_h, starts, w_ih, w_hh, b_ih, b_hh):
        n_rows, n_steps = starts.shape
        size = w_hh.shape[1]
        pre = torch.addmm(b_ih, x.reshape(n_rows * n_steps, -1), w_ih.t())
        h_seq, h_prev, next_h = (x.new_empty(n_rows, n_steps, size) for _ in range(3))
        gates = x.new_empty(n_rows, n_steps, 4 * size)
        has_init = init_h.numel() > 0
        recurrent_cells.gru_forward(
            pre.view(n_rows, n_steps, -1).numpy(),
            _numpy(w_hh),
            _numpy(b_hh),
            _numpy(init_h),
            has_init,
            starts.numpy(),
            h_seq.numpy(),
            gates.numpy(),
            h_prev.numpy(),
            next_h.numpy(),
        )
        ctx.save_for_backward(x, starts, w_ih, w_hh, gates, h_prev)
        ctx.has_init = has_init
        return h_seq, next_h

    @staticmethod
    def backward(ctx, dh_seq, d_next_h):
        x, starts, w_ih, w_hh, gates, h_prev = ctx.saved_tensors
        width = 3 * h_prev.shape[-1]
        d_pre = x.new_empty(*starts.shape, width)
        d_hh = torch.empty_like(d_pre)
        d_h = torch.zeros_like(h_prev)
        recurrent_cells.gru_backward(
            _numpy(dh_seq),
            _numpy(d_next_h),
            _numpy(w_hh),
            starts.numpy(),
            h_prev.numpy(),
            gates.numpy(),
            d_pre.numpy(),
            d_hh.numpy(),
            d_h.numpy(),
        )
        dx, d_w_ih, d_b_ih = _input_grads(ctx, x, w_ih, d_pre)
        flat_hh = d_hh.view(-1, width)
        d_w_hh = weight_grad(flat_hh, h_prev.view(-1, h_prev.shape[-1]))
        return dx, d_h if ctx.has_init else None, None, d_w_ih, d_w_hh, d_b_ih, flat_hh.sum(0)
