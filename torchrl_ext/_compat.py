"""The one door to TorchRL, TensorDict and torch internals.

Every private upstream name the package relies on is reached through a named accessor here, with
one line on why it is needed and which public API would replace it. Keeping them in one module
means an upstream upgrade is checked in one place.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.envs import EnvBase

__all__ = [
    "env_reset_check_done",
    "env_step_and_maybe_reset",
    "env_step_mdp",
    "has_post_step_hooks",
    "native_autoreset",
    "new_tensordict_unchecked",
    "set_unchecked",
]


def new_tensordict_unchecked(
    source: dict, batch_size: torch.Size, device: torch.device | None
) -> TensorDict:
    """A TensorDict of ``source`` without validating its entries.

    Why: an env's outputs are fresh tensors it shaped itself; validation costs about as much as
    the step. Public replacement: ``TensorDict(source, batch_size, device)`` (validating).
    """
    return TensorDict._new_unsafe(source, batch_size=batch_size, device=device)


def set_unchecked(tensordict: TensorDictBase, key: Any, value: torch.Tensor) -> None:
    """Set an entry the caller built with the right batch size and device, unvalidated.

    Why: the fast setter ``EnvBase.any_done`` itself uses for values it made. Public replacement:
    ``tensordict.set(key, value)``, used for non-TensorDict inputs and nested keys.
    """
    if isinstance(tensordict, TensorDict) and isinstance(key, str):
        tensordict._set_str(key, value, validated=True, inplace=False, non_blocking=False)
    else:
        tensordict.set(key, value)


def env_step_mdp(env: EnvBase) -> Any:
    """The env's step-MDP helper (which keys move from ``"next"`` to the next root).

    Why: the fused step builds the next root itself and must agree with what TorchRL would
    carry. Public replacement: ``torchrl.envs.utils.step_mdp`` with the env's keys (slower).
    """
    return env._step_mdp


def has_post_step_hooks(env: EnvBase) -> bool:
    """Whether hooks run after TorchRL's step-MDP (then the fused path steps aside).

    Why: the fused step bypasses ``_step_mdp``, so it must not run when hooks expect it.
    Public replacement: none in TorchRL 0.14.
    """
    return env._post_step_mdp_hooks is not None


def native_autoreset(env: EnvBase) -> bool:
    """Whether TorchRL manages auto-resets of ``env`` itself (``auto_reset=True`` envs).

    Why: the fused step must not reset twice. Public replacement: none in TorchRL 0.14.
    """
    return env.__dict__.get("_torchrl_native_autoreset", False)


def env_step_and_maybe_reset(env: EnvBase, tensordict: TensorDictBase) -> tuple:
    """TorchRL's generic step-then-maybe-reset, for inputs the fused path does not take.

    Why: ``EnvBase._step_and_maybe_reset`` is the override point of ``step_and_maybe_reset``.
    Public replacement: ``EnvBase.step_and_maybe_reset`` (which would call back into the env).
    """
    return EnvBase._step_and_maybe_reset(env, tensordict)


def env_reset_check_done(env: EnvBase, tensordict: Any, tensordict_reset: Any) -> None:
    """TorchRL's check that no env is done right after its reset (a host read).

    Why: envs that never read back from the device skip it. Public replacement: none.
    """
    EnvBase._reset_check_done(env, tensordict, tensordict_reset)
