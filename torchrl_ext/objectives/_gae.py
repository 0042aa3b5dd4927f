"""The advantage step of :class:`~torchrl_ext.objectives.RecurrentGAE`: GAE over ``[N, T]`` rows.

:func:`compute_gae` is the one place that picks an implementation: the numba kernel for CPU
tensors, the Warp kernel for CUDA tensors (both in
:mod:`torchrl_ext.objectives._kernels.gae_recursion`), and :func:`gae_reference`, the plain torch
loop the tests use as the oracle, for any other device. Dtypes the kernels do not run
(float16, bfloat16) are computed in float32 and cast back.

CPU outputs come from a :class:`Workspace`: freshly allocated outputs of a large rollout are
mapped page by page by the first write to them, which costs more than the recursion itself once
the allocator has returned freed memory to the system (as it does between training
iterations). The workspace keeps its buffers mapped and hands one out again only when no
tensor uses it any more.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from torchrl_ext._workspace import Workspace
from torchrl_ext.objectives._kernels import gae_recursion as kernels


class GAEResult(NamedTuple):
    """What :func:`compute_gae` returns."""

    advantage: torch.Tensor  # shaped like the reward, the promoted input dtype
    value_target: torch.Tensor  # shaped like the reward
    is_init: torch.Tensor | None  # [N, T] bool, derived when first_is_init was given
    last_done: torch.Tensor  # [N] bool: whether any flag of each row's last step is done
    nonfinite: bool  # some input was NaN or infinite (then the outputs are not meaningful)


def td_error(reward, value, next_value, terminated, gamma):
    """``(r - V) + (0 if terminated else gamma * V') + (V' - V')``, elementwise.

    ``V' - V'`` is 0 for a finite ``V'`` and NaN otherwise, so a NaN next value shows even
    where ``terminated`` masks it.
    """
    boot = torch.where(terminated, torch.zeros_like(next_value), gamma * next_value)
    return (reward - value) + boot + (next_value - next_value)


def gae_reference(reward, value, next_value, terminated, done, gamma, lmbda):
    """GAE as a plain torch loop over time: ``(advantage, value_target)``, ``[N, T, K]``.

    Inputs are ``[N, T, K]`` (bool flags broadcastable to the values), one floating dtype.
    The arithmetic is the compiled kernels', step for step.
    """

    def scalar(x):
        return torch.tensor(x, dtype=reward.dtype, device=reward.device)

    zero, gamma_lmbda = scalar(0.0), scalar(gamma * lmbda)
    delta = td_error(reward, value, next_value, terminated, scalar(gamma))
    decay = torch.where(done, zero, gamma_lmbda).expand_as(delta)
    advantage = torch.empty_like(delta)
    acc = torch.zeros_like(delta[:, 0])
    for t in reversed(range(delta.shape[1])):
        acc = delta[:, t] + decay[:, t] * acc
        advantage[:, t] = acc
    return advantage, advantage + value


def derive_is_init(
    done_rows: torch.Tensor, first_is_init: torch.Tensor, out: torch.Tensor | None = None
) -> torch.Tensor:
    """``is_init``: bool ``[N, T]`` ``done`` one step later, ``first_is_init`` (``[N]``) first.

    Written into ``out`` when given, else into a new tensor.
    """
    is_init = torch.empty_like(done_rows) if out is None else out
    if done_rows.is_contiguous():  # one flat copy: row n's first step gets row n - 1's last
        is_init.view(-1)[1:] = done_rows.view(-1)[:-1]
    else:
        is_init[:, 1:] = done_rows[:, :-1]
    is_init[:, 0] = first_is_init.to(done_rows.device)
    return is_init


def compute_gae(
    inputs: tuple[torch.Tensor, ...],
    gamma: float,
    lmbda: float,
    first_is_init: torch.Tensor | None,
    workspace: Workspace,
) -> GAEResult:
    """Runs GAE over ``[N, T, *feature]`` rows and derives the reset flags.

    The feature dims are folded into ``K`` channels for the recursion (without copying where
    the inputs already are ``[N, T, K]``) and unfolded in the outputs.

    Args:
        inputs (tuple of torch.Tensor): ``(reward, value, next_value, terminated, done)`` on
            one device (any strides): floating ``[N, T, *feature]`` values and bool
            ``[N, T, *f]`` flags whose ``f`` broadcasts to ``feature``.
        gamma (float): discount.
        lmbda (float): GAE trace decay.
        first_is_init (torch.Tensor, optional): bool ``[N]``; when given, ``is_init`` is
            derived with it as its first column.
        workspace (Workspace): where CPU outputs come from.

    Returns:
        A :class:`GAEResult`, advantage and value target shaped like the reward. ``nonfinite``
        may also be set by a result that overflowed.
    """
    shape = inputs[0].shape
    feature = shape[2:]
    if len(feature) != 1 or any(x.shape[2:] != feature for x in inputs[3:]):
        inputs = tuple(_to_channels(x, feature) for x in inputs)
    gae = _compute_gae_channels(inputs, gamma, lmbda, first_is_init, workspace)
    if gae.advantage.shape == shape:
        return gae
    return gae._replace(
        advantage=gae.advantage.reshape(shape), value_target=gae.value_target.reshape(shape)
    )


def _to_channels(x: torch.Tensor, feature: torch.Size) -> torch.Tensor:
    """``[N, T, *f]`` -> ``[N, T, K]`` (broadcasting ``f`` to ``feature`` without copying).

    Args:
        x (torch.Tensor): rows ``[N, T, *f]`` whose ``f`` broadcasts to ``feature``.
        feature (torch.Size): the per-step shape of the reward.
    """
    if len(feature) == 1 and x.shape[2:] == feature:
        return x
    n_rows, steps = x.shape[:2]
    x = x.reshape(n_rows, steps, *([1] * (len(feature) - (x.ndim - 2))), *x.shape[2:])
    return x.expand(n_rows, steps, *feature).reshape(n_rows, steps, -1)


def _compute_gae_channels(
    inputs: tuple[torch.Tensor, ...],
    gamma: float,
    lmbda: float,
    first_is_init: torch.Tensor | None,
    workspace: Workspace,
) -> GAEResult:
    """:func:`compute_gae` over ``[N, T, K]`` inputs (bool flags broadcast allowed)."""
    reward, value, next_value, terminated, done = inputs
    out_dtype = torch.promote_types(
        torch.promote_types(reward.dtype, value.dtype), next_value.dtype
    )
    dtype = out_dtype if out_dtype in kernels.DTYPES else torch.float32
    floats = tuple(x.to(dtype) for x in (reward, value, next_value))
    inputs = (*floats, terminated, done)
    device = reward.device
    done_rows = done[..., 0] if done.shape[2] == 1 else done.any(-1)
    if device.type == "cpu":
        advantage = workspace.empty(reward.shape, dtype)
        value_target = workspace.empty(reward.shape, dtype)
        nonfinite = kernels.gae_cpu(inputs, gamma, lmbda, advantage, value_target)
        is_init = None
        if first_is_init is not None:
            out = workspace.empty(done_rows.shape, torch.bool)
            is_init = derive_is_init(done_rows, first_is_init, out)
    else:
        if device.type == "cuda":
            advantage, value_target = torch.empty_like(floats[0]), torch.empty_like(floats[0])
            nonfinite = kernels.gae_warp(inputs, gamma, lmbda, advantage, value_target)
        else:
            advantage, value_target = gae_reference(*inputs, gamma, lmbda)
            nonfinite = not bool(torch.isfinite(advantage[:, 0]).all())
        is_init = None if first_is_init is None else derive_is_init(done_rows, first_is_init)
    if dtype != out_dtype:
        advantage, value_target = advantage.to(out_dtype), value_target.to(out_dtype)
    return GAEResult(advantage, value_target, is_init, done_rows[:, -1].clone(), nonfinite)
