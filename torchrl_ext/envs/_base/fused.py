"""TorchRL's step-then-maybe-reset, fused: the next root built from one launch's outputs.

TorchRL's generic ``step_and_maybe_reset`` steps, moves ``"next"`` to a new root
(``_step_mdp``), then resets the done envs and merges with ``where``. A WarpEnv's fused kernel
has already reset them and observed the reset state, so the root is the input's carried
entries (zeroed for the envs that reset, as TorchRL's partial-reset merge does) plus the fresh
root observations and all-False flags. These helpers build it exactly as TorchRL would.
"""

from __future__ import annotations

import functools

import torch
from tensordict import TensorDict, TensorDictBase, is_tensor_collection
from torchrl.envs import EnvBase

from torchrl_ext._compat import (
    env_step_mdp,
    has_post_step_hooks,
    native_autoreset,
    new_tensordict_unchecked,
    set_unchecked,
)
from torchrl_ext.envs._base.layout import Layout


def takes_fast_path(env: EnvBase, tensordict: TensorDictBase) -> bool:
    """Whether the fused step may build the next root itself (else TorchRL's generic path).

    Not with post-step hooks or TorchRL-managed auto-reset, nor for inputs holding ``"_step"``
    or ``"next"``, nor for inputs on another device.
    """
    keys = tensordict.keys()
    return (
        not has_post_step_hooks(env)
        and not native_autoreset(env)
        and "_step" not in keys
        and "next" not in keys
        and _on_device(tensordict, env.device)
    )


def _on_device(tensordict: TensorDictBase, device: torch.device) -> bool:
    """Whether ``tensordict`` is on ``device``, or device-less with every leaf there.

    TorchRL's generic path moves a device-less input with ``.to(device)``, which changes
    nothing when every leaf is already there (e.g. a carrier after ``clear_device_()``).
    """
    if tensordict.device is not None:
        return tensordict.device == device
    return all(
        not isinstance(val, torch.Tensor) or val.device == device
        for _, val in tensordict.items(True, True)
    )


@functools.cache
def _zero_scalar(dtype: torch.dtype) -> torch.Tensor:
    """A 0-dim CPU zero of ``dtype``: the fill ``torch.where`` takes on any device."""
    return torch.zeros((), dtype=dtype)


def kept(value: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """A fresh copy of ``value`` (leading dim N) with the rows where ``keep`` is False zeroed."""
    mask = keep.view(keep.shape[0], *([1] * (value.dim() - 1)))
    return torch.where(mask, value, _zero_scalar(value.dtype))


def keep_mask(done: torch.Tensor, sync_free: bool) -> torch.Tensor | None:
    """``[N]`` bool, True for the envs that did not reset; ``None`` if none or all did.

    With ``sync_free`` it is never ``None``: it is all True when no env or every env reset,
    decided on the device, which zeroes the same entries. TorchRL's partial reset merges with
    ``where(~_reset, old, reset_data, pad=0)``: entries the reset does not write become zero for
    the reset envs, and stay as they are when every env resets at once.
    """
    done = done.view(done.shape[0])
    if sync_free:
        return ~done | done.all()
    if int(done.count_nonzero()) in (0, done.shape[0]):
        return None
    return ~done


def zero_carried(tree: TensorDictBase, keep: torch.Tensor, skip: frozenset) -> None:
    """Replace every tensor leaf of ``tree`` not in ``skip`` by a copy zeroed where not kept."""
    for key, val in list(tree.items(True, True)):
        if key not in skip and isinstance(val, torch.Tensor):
            set_unchecked(tree, key, kept(val, keep))


def is_plain_step_mdp(env: object, tensordict: TensorDictBase, produced: frozenset) -> bool:
    """Whether :func:`carried_root` builds exactly what TorchRL's ``_step_mdp`` would.

    True for a plain, unnamed ``TensorDict`` when the step-MDP excludes top-level keys only and
    takes from ``"next"`` exactly the top-level keys the env produces.
    """
    mdp = env_step_mdp(env)
    return (
        type(tensordict) is TensorDict
        and all(sub is None for sub in mdp.exclude_from_root.values())
        and all(sub is None for sub in mdp.keys_from_next.values())
        and mdp.keys_from_next.keys() == produced
        and all(name is None for name in tensordict.names)
    )


def carried_root(
    env: object, tensordict: TensorDict, keep: torch.Tensor | None, produced: frozenset
) -> TensorDict:
    """The next root's carried entries, as ``_step_mdp`` copies them, zeroed where reset.

    Nested tensordicts are shallow copies (as ``_step_mdp`` makes them), so replacing their
    leaves never touches the input's.
    """
    excluded = env_step_mdp(env).exclude_from_root
    source = {}
    for key, val in tensordict.items():
        if key in excluded:
            continue
        if is_tensor_collection(val):
            val = val.copy()
            if keep is not None and isinstance(val, TensorDictBase):
                zero_carried(val, keep, frozenset())
        elif keep is not None and key not in produced:
            val = kept(val, keep)
        source[key] = val
    return new_tensordict_unchecked(source, tensordict.batch_size, tensordict.device)


def carried_entries(
    env: object, tensordict: TensorDictBase, keep: torch.Tensor | None, produced: frozenset
) -> TensorDictBase:
    """The next root's carried entries, by the fast path where it equals TorchRL's."""
    if is_plain_step_mdp(env, tensordict, produced):
        return carried_root(env, tensordict, keep, produced)
    root = env_step_mdp(env)(tensordict)
    if keep is not None:
        zero_carried(root, keep, produced)
    return root


def next_root(
    env: object, tensordict: TensorDictBase, layout: Layout, sync_free: bool
) -> TensorDictBase:
    """The next root after a fused step that wrote ``layout``'s buffers.

    The input's carried entries (zeroed for the envs that reset, see :func:`keep_mask`), then
    fresh copies of the root observations and all-False done flags.

    Args:
        env (EnvBase): the env, whose step-MDP helper says what is carried.
        tensordict (TensorDictBase): the step's input.
        layout (Layout): the env's buffers, after the fused step.
        sync_free (bool): decide which envs reset on the device (see :func:`keep_mask`).
    """
    keep = keep_mask(layout.flag_buffer[0], sync_free)
    root = carried_entries(env, tensordict, keep, layout.produced_keys)
    for key, val in layout.fresh_obs("root").items():
        set_unchecked(root, key, val)
    for key, val in layout.fresh_flags(False).items():
        set_unchecked(root, key, val)
    return root
