"""The GAE recursion, compiled: a numba kernel for CPU tensors and a Warp kernel for CUDA tensors.

Both walk each ``(env, channel)`` row backwards in time over ``[N, K, T]`` views (time last,
any strides, so time-major data and broadcast flags need no copy) with the arithmetic of
:func:`torchrl_ext.objectives._gae.gae_reference`, step for step:

``delta = (r - V) + (0 if terminated else gamma * V') + (V' - V')`` and
``A = delta + (0 if done else gamma * lmbda) * A``.

``V' - V'`` is 0 for a finite ``V'`` and NaN otherwise, so a NaN next value shows even where
``terminated`` masks it; a non-finite TD error makes every earlier advantage of its row
non-finite, across cut traces too (``0 * inf`` is NaN). So each row's advantage at its first
step tells whether any of its inputs was NaN or infinite, and the caller checks only those.

The CPU kernel advances eight rows together: one row's recursion is a chain of dependent
multiply-adds, and eight independent chains keep the core busy. Per block of eight rows it
computes the TD errors and trace decays forwards in time into a small scratch (loops the
compiler vectorizes), runs the recursion over the scratch backwards, then writes the
advantages and value targets forwards. Outputs of :data:`STREAM_BYTES` or more are written
with streaming stores, which write around the caches: a plain store first reads each line it
writes into, and on a rollout larger than the caches that read is a quarter of the kernel's
memory traffic.

The Warp kernel runs one thread per row: on CUDA that is one launch where a torch loop over
time would be several launches per step.
"""

from __future__ import annotations

import sys
from typing import Any

import numba
import numpy as np
import torch
import warp as wp

from torchrl_ext import _warp
from torchrl_ext._native.intrinsics import store_stream

#: Rows the CPU kernel advances together.
LANES = 8
#: Outputs of at least this many bytes are written with streaming stores (see the module doc).
STREAM_BYTES = 1 << 22
#: Dtypes both kernels run natively.
DTYPES = (torch.float32, torch.float64)


@numba.njit(cache=True, nogil=True)
def _gae_block(inputs, coefs, outputs, stream, first, delta, decay):
    """The recursion over rows ``first .. first + LANES - 1`` (a short last block repeats its last).

    Returns whether some row's advantage at its first step is not finite.
    """
    reward, value, next_value, terminated, done = inputs
    gamma, gamma_lmbda = coefs
    n_rows, n_chan, n_steps = reward.shape
    last = n_rows * n_chan - 1
    zero = gamma - gamma
    for j in range(LANES):
        n, k = divmod(min(first + j, last), n_chan)
        for t in range(n_steps):
            nv = next_value[n, k, t]
            boot = zero if terminated[n, k, t] else gamma * nv
            delta[j, t] = (reward[n, k, t] - value[n, k, t]) + boot + (nv - nv)
            decay[j, t] = zero if done[n, k, t] else gamma_lmbda
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = zero
    for i in range(n_steps):
        t = n_steps - 1 - i
        a0 = delta[0, t] + decay[0, t] * a0
        a1 = delta[1, t] + decay[1, t] * a1
        a2 = delta[2, t] + decay[2, t] * a2
        a3 = delta[3, t] + decay[3, t] * a3
        a4 = delta[4, t] + decay[4, t] * a4
        a5 = delta[5, t] + decay[5, t] * a5
        a6 = delta[6, t] + decay[6, t] * a6
        a7 = delta[7, t] + decay[7, t] * a7
        delta[0, t], delta[1, t], delta[2, t], delta[3, t] = a0, a1, a2, a3
        delta[4, t], delta[5, t], delta[6, t], delta[7, t] = a4, a5, a6, a7
    advantage, value_target = outputs  # flat views of contiguous [N, T, K] tensors
    for j in range(LANES):
        n, k = divmod(min(first + j, last), n_chan)
        start = n * n_steps * n_chan + k
        if stream:
            for t in range(n_steps):
                i = start + t * n_chan
                store_stream(advantage, (i,), delta[j, t])
                store_stream(value_target, (i,), delta[j, t] + value[n, k, t])
        else:
            for t in range(n_steps):
                i = start + t * n_chan
                advantage[i] = delta[j, t]
                value_target[i] = delta[j, t] + value[n, k, t]
    check = (a0 + a1) + (a2 + a3) + (a4 + a5) + (a6 + a7)
    return check - check != zero


@numba.njit(cache=True, nogil=True)
def _gae_rows(inputs, coefs, outputs, stream):
    """The recursion over all rows of ``[N, K, T]`` arrays; returns whether any was non-finite.

    ``stream``: write the outputs with streaming stores.
    """
    reward = inputs[0]
    n_rows, n_chan, n_steps = reward.shape
    delta = np.empty((LANES, n_steps), dtype=reward.dtype)
    decay = np.empty((LANES, n_steps), dtype=reward.dtype)
    nonfinite = False
    for first in range(0, n_rows * n_chan, LANES):
        nonfinite |= _gae_block(inputs, coefs, outputs, stream, first, delta, decay)
    return nonfinite


def gae_cpu(inputs, gamma, lmbda, advantage, value_target) -> bool:
    """Runs the numba kernel; returns whether some input was NaN or infinite.

    Args:
        inputs: ``(reward, value, next_value, terminated, done)``, CPU tensors ``[N, T, K]``
            of one dtype in :data:`DTYPES` (bool flags), any strides.
        gamma (float): discount.
        lmbda (float): GAE trace decay.
        advantage (torch.Tensor): ``[N, T, K]`` output, written (in place when contiguous,
            as the callers' outputs are, else through a contiguous copy).
        value_target (torch.Tensor): ``[N, T, K]`` output, written likewise.
    """
    scalar = np.dtype(str(inputs[0].dtype).removeprefix("torch."))
    coefs = (scalar.type(gamma), scalar.type(gamma * lmbda))
    arrays = tuple(_time_last(x) for x in inputs)
    outputs = (advantage, value_target)
    if not all(x.is_contiguous() for x in outputs):  # the kernel writes flat outputs
        dense = [torch.empty_like(x, memory_format=torch.contiguous_format) for x in outputs]
        nonfinite = gae_cpu(inputs, gamma, lmbda, *dense)
        advantage.copy_(dense[0])
        value_target.copy_(dense[1])
        return nonfinite
    outputs = (advantage.view(-1).numpy(), value_target.view(-1).numpy())
    stream = 2 * advantage.numel() * advantage.element_size() >= STREAM_BYTES
    return bool(_gae_rows(arrays, coefs, outputs, stream))


def _time_last(x: torch.Tensor) -> np.ndarray:
    """``[N, T, K]`` -> an ``[N, K, T]`` numpy view (no copy)."""
    return x.permute(0, 2, 1).numpy()


@wp.kernel(enable_backward=False)
def _gae_rows_warp(
    reward: wp.array3d(dtype=Any),
    value: wp.array3d(dtype=Any),
    next_value: wp.array3d(dtype=Any),
    terminated: wp.array3d(dtype=wp.uint8),
    done: wp.array3d(dtype=wp.uint8),
    gamma: Any,
    gamma_lmbda: Any,
    advantage: wp.array3d(dtype=Any),
    value_target: wp.array3d(dtype=Any),
    first_advantage: wp.array2d(dtype=Any),
):
    """One thread per ``(row, channel)`` of ``[N, T, K]`` views; writes each row's first ``A``."""
    n, k = wp.tid()
    steps = reward.shape[1]
    zero = reward.dtype(0.0)
    acc = reward.dtype(0.0)
    for i in range(steps):
        t = steps - 1 - i
        nv = next_value[n, t, k]
        boot = wp.where(terminated[n, t, k] != wp.uint8(0), zero, gamma * nv)
        delta = (reward[n, t, k] - value[n, t, k]) + boot + (nv - nv)
        decay = wp.where(done[n, t, k] != wp.uint8(0), zero, gamma_lmbda)
        acc = delta + decay * acc
        advantage[n, t, k] = acc
        value_target[n, t, k] = acc + value[n, t, k]
    first_advantage[n, k] = acc


for _scalar in (wp.float32, wp.float64):
    _array = wp.array3d(dtype=_scalar)
    wp.overload(
        _gae_rows_warp,
        {
            "reward": _array,
            "value": _array,
            "next_value": _array,
            "gamma": _scalar,
            "gamma_lmbda": _scalar,
            "advantage": _array,
            "value_target": _array,
            "first_advantage": wp.array2d(dtype=_scalar),
        },
    )

_LOADED_DEVICES: set[str] = set()


def _ready(device: torch.device):
    """Initializes Warp and loads this module's kernels on ``device`` (quietly)."""
    key = str(device)
    if key not in _LOADED_DEVICES:
        _warp.init()
        wp.load_module(sys.modules[__name__], device=wp.device_from_torch(device))
        _LOADED_DEVICES.add(key)
    return wp.device_from_torch(device)


def gae_warp(inputs, gamma, lmbda, advantage, value_target) -> bool:
    """Runs the Warp kernel (any Warp device); same contract as :func:`gae_cpu`."""
    reward = inputs[0]
    device = reward.device
    wp_device = _ready(device)
    scalar = {torch.float32: wp.float32, torch.float64: wp.float64}[reward.dtype]
    n_rows, _, n_chan = reward.shape
    first = torch.empty(n_rows, n_chan, dtype=reward.dtype, device=device)
    flags = [wp.from_torch(x.view(torch.uint8), dtype=wp.uint8) for x in inputs[3:]]
    wp.launch(
        _gae_rows_warp,
        dim=(n_rows, n_chan),
        inputs=[
            *(wp.from_torch(x) for x in inputs[:3]),
            *flags,
            scalar(gamma),
            scalar(gamma * lmbda),
        ],
        outputs=[wp.from_torch(advantage), wp.from_torch(value_target), wp.from_torch(first)],
        device=wp_device,
        stream=wp.stream_from_torch(device) if device.type == "cuda" else None,
    )
    return not bool(torch.isfinite(first).all())
