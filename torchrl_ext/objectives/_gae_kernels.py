"""The fast GAE scan: one Warp kernel, one thread per (env, value channel).

The Python side only checks dtypes, allocates the outputs and launches. Inputs are
``[N, T, K]`` views (any strides, so time-major data and broadcast flags need no copy):
``N`` rows walked backwards in time, ``K`` independent value channels (agents) per row.
"""

from __future__ import annotations

import contextlib
import io
import sys
from typing import Any

import torch
import warp as wp

#: Dtypes the kernel runs natively; others are computed in float32 and cast back.
_NATIVE_DTYPES = {torch.float32: wp.float32, torch.float64: wp.float64}

#: Bits of the per-thread NaN flag, one per input stream.
NAN_REWARD, NAN_VALUE, NAN_NEXT_VALUE = 1, 2, 4


@wp.kernel(enable_backward=False)
def _gae_scan_kernel(
    reward: wp.array3d(dtype=Any),
    value: wp.array3d(dtype=Any),
    next_value: wp.array3d(dtype=Any),
    terminated: wp.array3d(dtype=wp.uint8),
    done: wp.array3d(dtype=wp.uint8),
    gamma: Any,
    gamma_lmbda: Any,
    advantage: wp.array3d(dtype=Any),
    value_target: wp.array3d(dtype=Any),
    nan_flags: wp.array2d(dtype=wp.int32),
):
    """Backward GAE recursion along one row: bootstrap on terminated, cut the trace on done."""
    n, k = wp.tid()
    steps = reward.shape[1]
    zero = reward.dtype(0.0)
    one = reward.dtype(1.0)
    acc = zero
    flags = int(0)  # noqa: UP018, RUF046 (Warp needs the constructor for a loop variable)
    for i in range(steps):
        t = steps - 1 - i
        r = reward[n, t, k]
        v = value[n, t, k]
        nv = next_value[n, t, k]
        if wp.isnan(r):
            flags = flags | 1
        if wp.isnan(v):
            flags = flags | 2
        if wp.isnan(nv):
            flags = flags | 4
        keep = one - reward.dtype(done[n, t, k])
        alive = one - reward.dtype(terminated[n, t, k])
        delta = r + gamma * alive * nv - v
        acc = delta + gamma_lmbda * keep * acc
        advantage[n, t, k] = acc
        value_target[n, t, k] = acc + v
    nan_flags[n, k] = flags


for _scalar in _NATIVE_DTYPES.values():
    _array = wp.array3d(dtype=_scalar)
    wp.overload(
        _gae_scan_kernel,
        {
            "reward": _array,
            "value": _array,
            "next_value": _array,
            "gamma": _scalar,
            "gamma_lmbda": _scalar,
            "advantage": _array,
            "value_target": _array,
        },
    )

_LOADED_DEVICES: set[str] = set()


def _ready(device: torch.device) -> wp.context.Device:
    """Initializes Warp and loads this module's kernels on ``device``, keeping stdout clean.

    Warp prints a banner on init and a line per module load; both would end up in the
    caller's output (and break doctests), so they are captured here.
    """
    key = str(device)
    if key not in _LOADED_DEVICES:
        with contextlib.redirect_stdout(io.StringIO()):
            wp.init()
            wp_device = wp.device_from_torch(device)
            wp.load_module(sys.modules[__name__], device=wp_device)
        _LOADED_DEVICES.add(key)
    return wp.device_from_torch(device)


def _as_flag(flag: torch.Tensor) -> wp.array:
    return wp.from_torch(flag.view(torch.uint8), dtype=wp.uint8)


def gae_scan(
    reward: torch.Tensor,
    value: torch.Tensor,
    next_value: torch.Tensor,
    terminated: torch.Tensor,
    done: torch.Tensor,
    gamma: float,
    lmbda: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Runs the GAE scan over ``[N, T, K]`` inputs.

    Args:
        reward (torch.Tensor): rewards ``[N, T, K]`` (floating point, any strides).
        value (torch.Tensor): values of the states ``[N, T, K]``.
        next_value (torch.Tensor): values of the next states ``[N, T, K]``.
        terminated (torch.Tensor): bool ``[N, T, K]`` (broadcast strides allowed).
        done (torch.Tensor): bool ``[N, T, K]``.
        gamma (float): discount.
        lmbda (float): GAE trace decay.

    Returns:
        ``(advantage, value_target, nan_flags)``: two new ``[N, T, K]`` tensors of the
        reward's dtype and an int32 ``[N, K]`` tensor whose bits say which input held NaN.
    """
    wp_device = _ready(reward.device)
    out_dtype = torch.promote_types(
        torch.promote_types(reward.dtype, value.dtype), next_value.dtype
    )
    calc_dtype = out_dtype if out_dtype in _NATIVE_DTYPES else torch.float32
    reward, value, next_value = (x.to(calc_dtype) for x in (reward, value, next_value))
    scalar = _NATIVE_DTYPES[calc_dtype]
    n_rows, _, n_chan = reward.shape
    advantage = torch.empty(reward.shape, dtype=calc_dtype, device=reward.device)
    value_target = torch.empty_like(advantage)
    nan_flags = torch.zeros(n_rows, n_chan, dtype=torch.int32, device=reward.device)
    wp.launch(
        _gae_scan_kernel,
        dim=(n_rows, n_chan),
        inputs=[
            wp.from_torch(reward),
            wp.from_torch(value),
            wp.from_torch(next_value),
            _as_flag(terminated),
            _as_flag(done),
            scalar(gamma),
            scalar(gamma * lmbda),
        ],
        outputs=[wp.from_torch(advantage), wp.from_torch(value_target), wp.from_torch(nan_flags)],
        device=wp_device,
        stream=wp.stream_from_torch(reward.device) if reward.is_cuda else None,
    )
    if calc_dtype != out_dtype:
        advantage, value_target = advantage.to(out_dtype), value_target.to(out_dtype)
    return advantage, value_target, nan_flags
