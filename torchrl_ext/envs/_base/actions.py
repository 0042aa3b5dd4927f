"""Loading actions: every action entry checked against its spec, then copied into its buffer.

Checks run before anything is copied, so a refused action leaves the env as it was. Value checks
come from the spec: a categorical entry must lie in its range, a float entry must not be NaN.
With ``sync_free`` the value checks run on the device and only set a fault flag (see
:attr:`~torchrl_ext.envs.WarpEnv.sync_free`); the host never waits for the device.
"""

from __future__ import annotations

from typing import Any

import torch
from torchrl.data import Bounded, Categorical, MultiCategorical, TensorSpec

from torchrl_ext._checks import check_tensor
from torchrl_ext.envs._base.arguments import FLOAT_DTYPES
from torchrl_ext.envs._memory import empty_output


def key_name(key: Any) -> str:
    """A TensorDict key as one str: nested keys joined with dots."""
    return key if isinstance(key, str) else ".".join(key)


def _upper(spec: TensorSpec) -> int | torch.Tensor | None:
    """The exclusive upper bound of a categorical spec's values, else ``None``."""
    if isinstance(spec, MultiCategorical):
        return spec.nvec
    if isinstance(spec, Categorical):
        return spec.space.n
    return None


def out_of_spec(spec: TensorSpec, action: torch.Tensor) -> torch.Tensor | None:
    """Where ``action`` holds a value the env cannot step: a bool mask of its shape, or ``None``.

    The one definition of a bad action, derived from the action spec: a categorical value
    outside ``[0, n)`` (per column for ``MultiCategorical``), a NaN float. ``None``: the spec
    admits every value of the dtype. :func:`check_values` reads it on the host, :func:`fault`
    reduces it on the device.
    """
    upper = _upper(spec)
    if upper is not None:
        if isinstance(upper, torch.Tensor):
            upper = upper.to(action.device)
        return (action < 0) | (action >= upper)
    if action.dtype in FLOAT_DTYPES:
        return torch.isnan(action)
    return None


def check_values(spec: TensorSpec, name: str, action: torch.Tensor) -> None:
    """Raise ``ValueError`` naming the first value :func:`out_of_spec` finds, with its bound."""
    upper = _upper(spec)
    if isinstance(upper, int):  # one bound: one reduction and two host reads when all is well
        low, high = (int(x) for x in torch.aminmax(action))
        if low >= 0 and high < upper:
            return
    bad = out_of_spec(spec, action)
    if bad is None or not bool(bad.any()):
        return
    where = tuple(int(i) for i in bad.nonzero()[0])
    value = action[where].item()
    if upper is None:
        raise ValueError(f"{name} must not contain NaN, got {name}[{where}]=nan.")
    if isinstance(upper, int):
        if upper == 2:
            raise ValueError(f"{name} entries must be 0 or 1, got an {name} entry {value}.")
        raise ValueError(f"{name} entries must lie in [0, {upper}), got an entry {value}.")
    bound = int(torch.broadcast_to(upper.to(action.device), action.shape)[where])
    column = f"{name}[:, {where[-1]}]" if action.dim() > 1 else name
    raise ValueError(
        f"{column} entries must lie in [0, {bound}), got {name}[{', '.join(map(str, where))}]"
        f"={value}."
    )


def check_movable(tensordict: Any, keys: list, device: torch.device) -> None:
    """Raise ``ValueError`` for an action that TorchRL could not move to ``device`` (meta).

    TorchRL's generic step paths move the whole input to the env's device before any check of
    ours runs; a meta tensor would fail there with an error that names no entry.
    """
    for key in keys:
        action = tensordict.get(key, None)
        if isinstance(action, torch.Tensor) and action.is_meta:
            name = key_name(key)
            raise ValueError(f"{name} must be on {device}, got {name}.device=meta.")


def fault(spec: TensorSpec, action: torch.Tensor) -> torch.Tensor | None:
    """The device-side form of :func:`check_values`: a 0-dim bool, no host read."""
    bad = out_of_spec(spec, action)
    return None if bad is None else bad.any()


def clamp_into_spec(spec: TensorSpec, buffer: torch.Tensor) -> None:
    """Clamp a loaded categorical action into its range, in place, on the device.

    The sync-free path only flags a bad action (:func:`fault`); clamping it keeps what the env's
    functions see inside the spec, so an out-of-range index never reaches another env's arrays.
    In-range values are unchanged.
    """
    upper = _upper(spec)
    if isinstance(upper, int):
        buffer.clamp_(0, upper - 1)
    elif upper is not None:
        torch.minimum(buffer.clamp_(min=0), (upper - 1).to(buffer), out=buffer)


def load_actions(
    tensordict: Any,
    buffers: dict[Any, torch.Tensor],
    specs: dict[Any, TensorSpec],
    device: torch.device,
    sync_free: bool,
    flag: torch.Tensor,
) -> None:
    """Check every action entry of ``tensordict`` against its spec, then copy them into ``buffers``.

    Args:
        tensordict: the step's input (a TensorDict or mapping).
        buffers (dict): action key to the env's buffer (its dtype and shape are required).
        specs (dict): the specs the buffers follow, by key.
        device (torch.device): the env's device.
        sync_free (bool): check on the host and raise (``False``), or or the device-side
            :func:`fault` into ``flag`` and clamp a categorical action into its range once it
            is copied (:func:`clamp_into_spec`), so that the env's functions never see an index
            outside the spec (``True``).
        flag (torch.Tensor): the env's fault flag.
    """
    loaded = []
    for key, buffer in buffers.items():
        name = key_name(key)
        action = check_tensor(name, tensordict.get(key, None), buffer.dtype, [buffer.shape], device)
        if not sync_free:
            check_values(specs[key], name, action)
        elif (found := fault(specs[key], action)) is not None:
            flag.logical_or_(found)
        loaded.append((key, buffer, action))
    for key, buffer, action in loaded:
        buffer.copy_(action)
        if sync_free:
            clamp_into_spec(specs[key], buffer)


def draw(spec: TensorSpec, sync_free: bool, device: torch.device) -> torch.Tensor:
    """``spec.rand()``, clamped on the device when ``sync_free``.

    TorchRL's bounded float draw checks ``(out > high).any()`` before clamping (a host read);
    the sync-free draw clamps with ``where``, bitwise the same values from the same RNG.
    """
    if not (sync_free and isinstance(spec, Bounded) and spec.dtype in FLOAT_DTYPES):
        return spec.rand()
    low, high = spec.space.low, spec.space.high
    out = torch.zeros(spec.shape, dtype=spec.dtype, device=device).uniform_()
    out = out * (high - low) + low
    out = torch.where(out > high, high.expand_as(out), out)
    return torch.where(out < low, low.expand_as(out), out)


def draw_steps(spec: TensorSpec, steps: int) -> torch.Tensor:
    """``[T, *spec.shape]`` uniform draws from ``spec`` (torch's global generator).

    A ``MultiCategorical`` entry is drawn as ``floor(u * nvec)`` for one uniform ``u`` per
    value, every column at once; every other spec by its own ``rand``.
    """
    if not isinstance(spec, MultiCategorical):
        return spec.rand((steps,))
    nvec = spec.nvec.to(spec.device)
    u = torch.rand((steps, *spec.shape), device=spec.device)
    return torch.minimum((u * nvec).to(spec.dtype), nvec - 1)


def coin_flips(num_envs: int, steps: int, device: torch.device) -> torch.Tensor:
    """``[num_envs, steps]`` int64 fair coin flips from torch's global generator.

    Each uniform random byte gives eight independent flips, so a rollout draws an eighth of the
    random numbers ``torch.randint(0, 2, ...)`` would, for the same distribution.
    """
    total = num_envs * steps
    draws = torch.randint(0, 256, (-(-total // 8),), dtype=torch.uint8, device=device)
    shifts = torch.arange(8, dtype=torch.uint8, device=device)
    flips = empty_output((draws.numel(), 8), torch.int64, device)
    torch.bitwise_and(draws.unsqueeze(-1) >> shifts, 1, out=flips)
    return flips.view(-1)[:total].view(num_envs, steps)
