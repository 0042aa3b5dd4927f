"""Loading actions: every action entry checked against its spec, then copied into its buffer.

Checks run before anything is copied, so a refused action leaves the env as it was. Value checks
come from the spec: a categorical entry must lie in its range, a float entry must not be NaN.
With ``sync_free`` the value checks run on the device and only set a fault flag (see
:attr:`~torchrl_ext.envs.WarpEnv.sync_free`); the host never waits for the device.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torchrl.data import Bounded, Categorical, MultiCategorical, TensorSpec

from torchrl_ext._checks import check_tensor
from torchrl_ext.envs._base.arguments import FLOAT_DTYPES


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


def check_values(spec: TensorSpec, name: str, action: torch.Tensor) -> None:
    """Raise ``ValueError`` for a categorical value out of range or a NaN float."""
    upper = _upper(spec)
    if isinstance(upper, int):  # one bound: one reduction, two host reads
        low, high = (int(x) for x in torch.aminmax(action))
        if low < 0 or high >= upper:
            bad = low if low < 0 else high
            if upper == 2:
                raise ValueError(f"{name} entries must be 0 or 1, got an {name} entry {bad}.")
            raise ValueError(f"{name} entries must lie in [0, {upper}), got an entry {bad}.")
    elif upper is not None:
        bad = (action < 0) | (action >= upper)
        if bool(bad.any()):
            bound = int(torch.broadcast_to(upper, action.shape)[bad][0])
            value = int(action[bad][0])
            raise ValueError(f"{name} entries must lie in [0, {bound}), got an entry {value}.")
    elif action.dtype in FLOAT_DTYPES:
        nan = torch.isnan(action)
        if bool(nan.any()):
            index = tuple(int(i) for i in nan.nonzero()[0])
            raise ValueError(f"{name} must not contain NaN, got {name}[{index}]=nan.")


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
    upper = _upper(spec)
    if upper is not None:
        return ((action < 0) | (action >= upper)).any()
    if action.dtype in FLOAT_DTYPES:
        return torch.isnan(action).any()
    return None


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
    device: torch.device,
    check: Callable[[Any, torch.Tensor], None] | None,
    faults: Callable[[Any, torch.Tensor], torch.Tensor | None] | None,
    flag: torch.Tensor,
    specs: dict[Any, TensorSpec] | None = None,
) -> None:
    """Check every action entry of ``tensordict``, then copy them into ``buffers``.

    Args:
        tensordict: the step's input (a TensorDict or mapping).
        buffers (dict): action key to the env's buffer (its dtype and shape are required).
        device (torch.device): the env's device.
        check (callable, optional): ``check(key, action)`` raises for bad values (host path).
        faults (callable, optional): ``faults(key, action)``, a 0-dim device bool (sync-free
            path), or'ed into ``flag``. Exactly one of ``check`` and ``faults`` is given.
        flag (torch.Tensor): the env's fault flag.
        specs (dict, optional): the specs the buffers follow, by key; a categorical action is
            clamped into its range after it is copied (:func:`clamp_into_spec`), as the
            sync-free path needs. Defaults to ``None`` (no clamping).
    """
    loaded = []
    for key, buffer in buffers.items():
        name = key_name(key)
        action = check_tensor(name, tensordict.get(key, None), buffer.dtype, [buffer.shape], device)
        if check is not None:
            check(key, action)
        else:
            found = faults(key, action)
            if found is not None:
                flag.logical_or_(found)
        loaded.append((key, buffer, action))
    for key, buffer, action in loaded:
        buffer.copy_(action)
        if specs is not None:
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
