"""One LSTM or GRU layer over ``[B, T]`` rows with state resets, compiled (numba, CPU).

Each kernel walks time once for all rows and does, per step, only what is serial: the product
of the previous hidden state with the recurrent weights (one BLAS call for all rows) and the
gates. A row's state is *replaced* at the steps flagged in ``starts`` by the stored state of
that step (``init``), which is how a row cut into episodes is run in one pass. The forward
kernel also writes the state after each segment's last step (zeros at the other steps:
TorchRL's ``("next", state)`` outputs), and the backward kernel takes their gradients.
Everything that is not serial is left to the caller as single matrix products over all steps:
the input projection before the forward kernel, and the weight and input gradients after the
backward kernel (the backward kernel writes the gate gradients of every step, and the forward
kernel the state each step started from, for that).

Gate order is ``torch.nn``'s: ``i, f, g, o`` for the LSTM, ``r, z, n`` for the GRU. Arrays are
batch-first and C-contiguous, of one float dtype. In float64 the activations are ``math``'s;
in float32 they are a rational approximation of ``tanh`` (accurate to a few ulp, ``sigmoid(x) =
(1 + tanh(x / 2)) / 2``) that the compiler vectorizes, where ``math.tanh`` and ``math.exp``
stay scalar calls that would cost more than the matrix products at small sizes.
"""

from __future__ import annotations

import math

import llvmlite.binding
import numba
import numpy as np
from numba import types
from numba.extending import get_cython_function_address, overload

from torchrl_ext import _compat


def _register_blas() -> str:
    """Binds the symbols the kernels call to torch's BLAS, else scipy's; returns which."""
    addresses = _compat.blas_gemm_addresses()
    source = "torch"
    if addresses is None:
        source = "scipy"
        addresses = {
            f"{p}gemm_": get_cython_function_address("scipy.linalg.cython_blas", f"{p}gemm")
            for p in "sd"
        }
    for symbol, address in addresses.items():
        llvmlite.binding.add_symbol(f"torchrl_ext_{symbol}", address)
    return source


#: Whose BLAS the per-step products run in: ``"torch"`` (its own, MKL on x86-64) or ``"scipy"``.
BLAS = _register_blas()
_GEMM_SIGNATURE = types.void(*([types.voidptr] * 13))
_SGEMM = types.ExternalFunction("torchrl_ext_sgemm_", _GEMM_SIGNATURE)
_DGEMM = types.ExternalFunction("torchrl_ext_dgemm_", _GEMM_SIGNATURE)


def _tanh(x):
    """``tanh`` (float64) or its vectorizable float32 approximation; compiled by overload."""
    return math.tanh(x)


def _sigmoid(x):
    """The logistic function, with the same precision choice as :func:`_tanh`."""
    return 1.0 / (1.0 + math.exp(-x))


@numba.njit(cache=True, error_model="numpy", inline="always")
def _tanh_float32(x):
    # a rational minimax fit on [-7.9, 7.9] (the form Eigen uses); beyond, tanh(x) = +-1 in float32
    bound = np.float32(7.90531110763549805)
    x = min(max(x, -bound), bound)
    x2 = x * x
    p = x2 * np.float32(-2.76076847742355e-16) + np.float32(2.00018790482477e-13)
    p = x2 * p + np.float32(-8.60467152213735e-11)
    p = x2 * p + np.float32(5.12229709037114e-08)
    p = x2 * p + np.float32(1.48572235717979e-05)
    p = x2 * p + np.float32(6.37261928875436e-04)
    p = x2 * p + np.float32(4.89352455891786e-03)
    q = x2 * np.float32(1.19825839466702e-06) + np.float32(1.18534705686654e-04)
    q = x2 * q + np.float32(2.26843463243900e-03)
    q = x2 * q + np.float32(4.89352518554385e-03)
    return x * p / q


@overload(_tanh, inline="always")
def _tanh_impl(x):
    if x == types.float32:
        return lambda x: _tanh_float32(x)
    return lambda x: math.tanh(x)


@overload(_sigmoid, inline="always")
def _sigmoid_impl(x):
    if x == types.float32:
        return lambda x: np.float32(0.5) + np.float32(0.5) * _tanh_float32(np.float32(0.5) * x)
    return lambda x: 1.0 / (1.0 + math.exp(-x))


def _gemm(a, b, transpose_b, out, scratch):
    """``out = a @ (b.T if transpose_b else b)``, C-contiguous; compiled by overload."""


@overload(_gemm, inline="always")
def _gemm_impl(a, b, transpose_b, out, scratch):
    gemm = _SGEMM if a.dtype == types.float32 else _DGEMM

    def impl(a, b, transpose_b, out, scratch):
        # Fortran BLAS is column-major: out.T = op(b).T @ a.T, every argument by address
        ints, scalars = scratch
        m, k = a.shape
        n = out.shape[1]
        ints[0] = 84 if transpose_b else 78  # 'T' or 'N'
        ints[1] = 78
        ints[2], ints[3], ints[4] = n, m, k
        ints[5] = k if transpose_b else n
        scalars[0], scalars[1] = 1, 0
        i, f = ints.ctypes.data, scalars.ctypes.data
        step, width = ints.itemsize, scalars.itemsize
        gemm(
            i, i + step, i + 2 * step, i + 3 * step, i + 4 * step,
            f, b.ctypes.data, i + 5 * step, a.ctypes.data, i + 4 * step,
            f + width, out.ctypes.data, i + 2 * step,
        )  # fmt: skip

    return impl


@numba.njit(cache=True, nogil=True)
def _blas_scratch(dtype_like):
    """The integers and scalars :func:`_gemm` passes by address."""
    return np.empty(6, np.int32), np.empty(2, dtype_like.dtype)


@numba.njit(cache=True, nogil=True)
def _begin_step(t, starts, init, has_init, state, state_seq):
    """Loads the stored state of rows that start at ``t``; else keeps the carried one."""
    zero = state.dtype.type(0)
    for b in range(state.shape[0]):
        if starts[b, t]:
            for k in range(state.shape[1]):
                state[b, k] = init[b, t, k] if has_init else zero
        if state_seq is not None:
            state_seq[b, t] = state[b]


@numba.njit(cache=True, nogil=True)
def _ends_at(t, starts, b):
    """Whether row ``b``'s segment ends at ``t`` (its last step, or the step before a start)."""
    return t == starts.shape[1] - 1 or starts[b, t + 1]


@numba.njit(cache=True, nogil=True)
def _store_ends(t, starts, state, next_state):
    """``next_state[:, t]``: the state of rows whose segment ends at ``t``, else zeros."""
    zero = state.dtype.type(0)
    for b in range(state.shape[0]):
        end = _ends_at(t, starts, b)
        for k in range(state.shape[1]):
            next_state[b, t, k] = state[b, k] if end else zero


@numba.njit(cache=True, nogil=True)
def _load_ends(t, starts, d_next_state, carried):
    """Adds the gradient of ``next_state[:, t]`` to the carried gradient of rows ending at ``t``."""
    for b in range(carried.shape[0]):
        if _ends_at(t, starts, b):
            for k in range(carried.shape[1]):
                carried[b, k] += d_next_state[b, t, k]


@numba.njit(cache=True, nogil=True)
def _end_step(t, starts, carried, d_init):
    """Hands the gradient reaching the state of rows that start at ``t`` to their stored state."""
    zero = carried.dtype.type(0)
    for b in range(carried.shape[0]):
        if starts[b, t]:
            for k in range(carried.shape[1]):
                d_init[b, t, k] = carried[b, k]
                carried[b, k] = zero


# Fast-math without contraction, reassociation or approximate functions: those let LLVM round
# differently in a freshly compiled function than in the same function loaded from numba's cache
# (or inlined elsewhere), and a seeded run must give the same bits in every process.
_FAST = {"cache": True, "nogil": True, "fastmath": {"nnan", "ninf", "nsz"}, "error_model": "numpy"}


@numba.njit(**_FAST)
def _lstm_cell(acc, pre, c, h, gates):
    """One row of one step: ``acc + pre`` are the gates' inputs; updates ``c`` and ``h``."""
    size = c.size
    for k in range(4 * size):
        gates[k] = _sigmoid(acc[k] + pre[k])
    for k in range(2 * size, 3 * size):
        gates[k] = _tanh(acc[k] + pre[k])
    for k in range(size):
        c[k] = gates[size + k] * c[k] + gates[k] * gates[2 * size + k]
        h[k] = gates[3 * size + k] * _tanh(c[k])


@numba.njit(**_FAST)
def _lstm_cell_grad(dh, dc, dh_out, c_before, c, gates, d_gates):
    """One row of one step back: ``dh``, ``dc`` carried in; leaves ``dc`` for the step before."""
    size = c.size
    one = c.dtype.type(1)
    for k in range(size):
        i, f = gates[k], gates[size + k]
        g, o = gates[2 * size + k], gates[3 * size + k]
        tanh_c = _tanh(c[k])
        dh_t = dh[k] + dh_out[k]
        dc_t = dc[k] + dh_t * o * (one - tanh_c * tanh_c)
        d_gates[k] = dc_t * g * i * (one - i)
        d_gates[size + k] = dc_t * c_before[k] * f * (one - f)
        d_gates[2 * size + k] = dc_t * i * (one - g * g)
        d_gates[3 * size + k] = dh_t * tanh_c * o * (one - o)
        dc[k] = dc_t * f


@numba.njit(**_FAST)
def lstm_forward(
    pre, w_hh, init_h, init_c, has_init, starts, h_seq, c_seq, gates, h_prev, next_h, next_c
):
    """Runs the layer; fills ``h_seq``, ``c_seq``, the activated ``gates`` and ``h_prev``.

    Args:
        pre: ``[B, T, 4H]`` input projections plus both biases.
        w_hh: ``[4H, H]`` recurrent weights.
        init_h: ``[B, T, H]`` stored hidden states, read where ``starts`` is set.
        init_c: ``[B, T, H]`` stored cell states, likewise.
        has_init: whether there are stored states (else rows start from zeros).
        starts: bool ``[B, T]``, set at every row's first step and at its episode starts.
        h_seq: ``[B, T, H]`` output: the hidden states after each step.
        c_seq: ``[B, T, H]`` output: the cell states after each step.
        gates: ``[B, T, 4H]`` output: ``i, f, g, o`` after their activations.
        h_prev: ``[B, T, H]`` output: the hidden state each step started from.
        next_h: ``[B, T, H]`` output: ``h`` after each segment's last step, zeros elsewhere.
        next_c: ``[B, T, H]`` output: ``c`` likewise.
    """
    n_rows, n_steps, width = pre.shape
    h = np.zeros((n_rows, width // 4), pre.dtype)
    c = np.zeros_like(h)
    acc = np.empty((n_rows, width), pre.dtype)
    scratch = _blas_scratch(pre)
    for t in range(n_steps):
        _begin_step(t, starts, init_h, has_init, h, h_prev)
        _begin_step(t, starts, init_c, has_init, c, None)
        _gemm(h, w_hh, True, acc, scratch)
        for b in range(n_rows):
            _lstm_cell(acc[b], pre[b, t], c[b], h[b], gates[b, t])
        c_seq[:, t] = c
        h_seq[:, t] = h
        _store_ends(t, starts, h, next_h)
        _store_ends(t, starts, c, next_c)


@numba.njit(**_FAST)
def lstm_backward(
    dh_seq, d_next_h, d_next_c, w_hh, init_c, has_init, starts, c_seq, gates, d_pre, d_h, d_c
):
    """Walks back in time; fills ``d_pre`` and the stored states' gradients ``d_h``, ``d_c``.

    Args:
        dh_seq: ``[B, T, H]`` gradient of ``h_seq``.
        d_next_h: ``[B, T, H]`` gradient of ``next_h``.
        d_next_c: ``[B, T, H]`` gradient of ``next_c``.
        w_hh: ``[4H, H]`` recurrent weights.
        init_c: as given to :func:`lstm_forward`.
        has_init: likewise.
        starts: likewise.
        c_seq: as :func:`lstm_forward` filled it.
        gates: likewise.
        d_pre: ``[B, T, 4H]`` output: gradients of the gates before activation.
        d_h: ``[B, T, H]`` zero-filled output: the stored hidden states' gradient, written
            where ``starts`` is set.
        d_c: ``[B, T, H]`` likewise for the stored cell states.
    """
    n_rows, n_steps, size = c_seq.shape
    dh = np.zeros((n_rows, size), c_seq.dtype)
    dc = np.zeros_like(dh)
    zeros = np.zeros(size, c_seq.dtype)
    d_step = np.empty((n_rows, 4 * size), c_seq.dtype)  # contiguous, for the BLAS call
    scratch = _blas_scratch(c_seq)
    for t in range(n_steps - 1, -1, -1):
        _load_ends(t, starts, d_next_h, dh)
        _load_ends(t, starts, d_next_c, dc)
        for b in range(n_rows):
            if not starts[b, t]:
                c_before = c_seq[b, t - 1]
            else:
                c_before = init_c[b, t] if has_init else zeros
            _lstm_cell_grad(
                dh[b],
                dc[b],
                dh_seq[b, t],
                c_before,
                c_seq[b, t],
                gates[b, t],
                d_step[b],
            )
        d_pre[:, t] = d_step
        _gemm(d_step, w_hh, False, dh, scratch)
        _end_step(t, starts, dh, d_h)
        _end_step(t, starts, dc, d_c)


@numba.njit(**_FAST)
def _gru_cell(acc, pre, b_hh, h, gates):
    """One row of one step (``acc = W_hh h``); updates ``h``, fills ``gates``."""
    size = h.size
    one = h.dtype.type(1)
    for k in range(2 * size):
        gates[k] = _sigmoid(pre[k] + acc[k] + b_hh[k])
    for k in range(size):
        hn = acc[2 * size + k] + b_hh[2 * size + k]
        n = _tanh(pre[2 * size + k] + gates[k] * hn)
        z = gates[size + k]
        h[k] = (one - z) * n + z * h[k]
        gates[2 * size + k] = n
        gates[3 * size + k] = hn


@numba.njit(**_FAST)
def _gru_cell_grad(dh, dh_out, h_before, gates, d_pre, d_hh, dh_direct):
    """One row of one step back: ``dh`` carried in; ``dh_direct`` is what passes through ``z``."""
    size = dh.size
    one = dh.dtype.type(1)
    for k in range(size):
        r, z = gates[k], gates[size + k]
        n, hn = gates[2 * size + k], gates[3 * size + k]
        dh_t = dh[k] + dh_out[k]
        dn = dh_t * (one - z) * (one - n * n)
        dz = dh_t * (h_before[k] - n) * z * (one - z)
        dr = dn * hn * r * (one - r)
        d_pre[k] = dr
        d_pre[size + k] = dz
        d_pre[2 * size + k] = dn
        d_hh[k] = dr
        d_hh[size + k] = dz
        d_hh[2 * size + k] = dn * r
        dh_direct[k] = dh_t * z


@numba.njit(**_FAST)
def gru_forward(pre, w_hh, b_hh, init_h, has_init, starts, h_seq, gates, h_prev, next_h):
    """Runs the layer; fills ``h_seq``, ``gates`` (``r, z, n`` and ``W_hn h + b_hn``), ``h_prev``.

    Args:
        pre: ``[B, T, 3H]`` input projections plus the input bias.
        w_hh: ``[3H, H]`` recurrent weights.
        b_hh: ``[3H]`` recurrent bias (zeros for a layer without bias).
        init_h: ``[B, T, H]`` stored states, read where ``starts`` is set.
        has_init: whether there are stored states (else rows start from zeros).
        starts: bool ``[B, T]``, set at every row's first step and at its episode starts.
        h_seq: ``[B, T, H]`` output: the states after each step.
        gates: ``[B, T, 4H]`` output.
        h_prev: ``[B, T, H]`` output: the state each step started from.
        next_h: ``[B, T, H]`` output: ``h`` after each segment's last step, zeros elsewhere.
    """
    n_rows, n_steps, width = pre.shape
    h = np.zeros((n_rows, width // 3), pre.dtype)
    acc = np.empty((n_rows, width), pre.dtype)
    scratch = _blas_scratch(pre)
    for t in range(n_steps):
        _begin_step(t, starts, init_h, has_init, h, h_prev)
        _gemm(h, w_hh, True, acc, scratch)
        for b in range(n_rows):
            _gru_cell(acc[b], pre[b, t], b_hh, h[b], gates[b, t])
        h_seq[:, t] = h
        _store_ends(t, starts, h, next_h)


@numba.njit(**_FAST)
def gru_backward(dh_seq, d_next_h, w_hh, starts, h_prev, gates, d_pre, d_hh, d_h):
    """Walks back in time; fills the gate gradients and the stored state's gradient ``d_h``.

    Args:
        dh_seq: ``[B, T, H]`` gradient of ``h_seq``.
        d_next_h: ``[B, T, H]`` gradient of ``next_h``.
        w_hh: ``[3H, H]`` recurrent weights.
        starts: as given to :func:`gru_forward`.
        h_prev: as :func:`gru_forward` filled it.
        gates: likewise.
        d_pre: ``[B, T, 3H]`` output: gradients of the input projections.
        d_hh: ``[B, T, 3H]`` output: gradients of ``W_hh h + b_hh``.
        d_h: ``[B, T, H]`` zero-filled output, written where ``starts`` is set.
    """
    n_rows, n_steps, size = h_prev.shape
    dh = np.zeros((n_rows, size), h_prev.dtype)
    dh_direct = np.empty_like(dh)
    d_step = np.empty((n_rows, 3 * size), h_prev.dtype)  # contiguous, for the BLAS call
    scratch = _blas_scratch(h_prev)
    for t in range(n_steps - 1, -1, -1):
        _load_ends(t, starts, d_next_h, dh)
        for b in range(n_rows):
            _gru_cell_grad(
                dh[b],
                dh_seq[b, t],
                h_prev[b, t],
                gates[b, t],
                d_pre[b, t],
                d_step[b],
                dh_direct[b],
            )
        d_hh[:, t] = d_step
        _gemm(d_step, w_hh, False, dh, scratch)
        dh += dh_direct
        _end_step(t, starts, dh, d_h)
