"""The common plain-GAE call, read and written with as little Python as possible.

:class:`~torchrl_ext.objectives.RecurrentGAE` without a value network, on an env-major
``[N, T]`` rollout of CPU tensors ``[N, T, 1]`` (contiguous, float32 or float64 rewards and
values, bool flags), the layout torchrl's collectors produce. In a training loop the call runs
between other work, with the interpreter's caches cold: there the general reader and writer
(time-dim resolution, layout views, per-check helpers, result records) cost about 0.3 ms a
call at 4096 x 256, a quarter of the kernel's time; this path costs about half of that.

:func:`plain_gae` either handles the call completely, or declines having written nothing, and
the general path then runs (and raises on bad input, with its messages). It declines anything
outside the common case, including every input the general path would reject, and results
with non-finite numbers.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from torchrl_ext.objectives import _gae_cpu


def plain_gae(
    td: TensorDictBase,
    keys,
    gamma: float,
    lmbda: float,
    carry: torch.Tensor | None,
) -> torch.Tensor | None:
    """Writes advantages into ``td`` if it is in the common layout; returns the new carry.

    Args:
        td (TensorDictBase): the rollout, batch ``[N, T]`` (time last, no dim names).
        keys: the estimator's configured keys (``_AcceptedKeys``).
        gamma (float): discount.
        lmbda (float): GAE trace decay.
        carry (torch.Tensor, optional): bool ``[N]``, the last ``done`` of the previous batch.

    Returns:
        The ``done`` flags of each row's last step (the next carry), or ``None`` when the input
        is not in the common layout or a result is not finite (then nothing was written).
    """
    inputs = _inputs(td, keys)
    if inputs is None:
        return None
    given = td.get(keys.is_init, None)
    if given is not None and not _one_flag_per_step(given):
        return None
    n_rows = inputs[0].shape[0]
    first = None
    if given is None:
        first = torch.ones(n_rows, dtype=torch.bool) if carry is None else carry
        if first.shape[0] != n_rows or not first.is_cpu:
            return None
    advantage, target, nonfinite, last_done, is_init = _gae_cpu.gae_scan_cpu(
        *inputs, gamma, lmbda, first
    )
    if nonfinite:
        return None
    td.set(keys.advantage, advantage)
    td.set(keys.value_target, target)
    if is_init is not None:
        td.set(keys.is_init, is_init.unsqueeze(-1))
    return last_done


def _one_flag_per_step(is_init) -> bool:
    """Whether a given ``is_init`` is a bool ``[N, T, 1]`` or ``[N, T]`` tensor."""
    return (
        isinstance(is_init, torch.Tensor)
        and is_init.dtype is torch.bool
        and is_init.shape[2:] in ((), (1,))
    )


def _inputs(td: TensorDictBase, keys) -> tuple[torch.Tensor, ...] | None:
    """``(reward, value, next_value, terminated, done)`` if all are in the common layout."""
    if td.batch_dims != 2 or td._has_names() or not _gae_cpu.AVAILABLE:
        return None
    nxt = td.get("next", None)
    if not isinstance(nxt, TensorDictBase):
        return None
    inputs = (
        nxt.get(keys.reward, None),
        td.get(keys.value, None),
        nxt.get(keys.value, None),
        nxt.get(keys.terminated, None),
        nxt.get(keys.done, None),
    )
    if not all(isinstance(x, torch.Tensor) for x in inputs):
        return None
    shape = inputs[0].shape
    if len(shape) != 3 or shape[2] != 1 or shape[0] * shape[1] == 0:
        return None
    dtype = inputs[0].dtype
    if dtype not in _gae_cpu.DTYPES or not inputs[0].is_cpu:
        return None
    for x, wanted in zip(inputs, (dtype, dtype, dtype, torch.bool, torch.bool), strict=True):
        if x.dtype is not wanted or x.shape != shape or not x.is_contiguous() or not x.is_cpu:
            return None
    return inputs
