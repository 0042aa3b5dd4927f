"""The one door to TorchRL, TensorDict and torch internals.

Every private upstream name the package relies on is reached through a named accessor here, with
one line on why it is needed and which public API would replace it. Keeping them in one module
means an upstream upgrade is checked in one place.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.envs import EnvBase

__all__ = [
    "blas_gemm_addresses",
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


def blas_gemm_addresses() -> dict[str, int] | None:
    """Addresses of ``sgemm_`` and ``dgemm_`` (Fortran BLAS) in torch's own CPU library.

    Why: the recurrent modules' compiled kernels multiply by the recurrent weights at every
    step; torch's BLAS (MKL in the x86-64 Linux wheels, linked into ``libtorch_cpu``, LP64
    integers) is about twice as fast as scipy's on the small products of a ``[8, 32]``
    minibatch, and follows ``torch.set_num_threads``. ``None`` where the library does not
    export them (the caller then uses scipy's BLAS). Public replacement: none (torch exposes
    no C entry point to its BLAS).
    """
    folder = os.path.join(os.path.dirname(torch.__file__), "lib")
    for name in ("libtorch_cpu.so", "libtorch_cpu.dylib", "torch_cpu.dll"):
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            continue
        try:
            library = ctypes.CDLL(path)
            return {
                symbol: ctypes.cast(getattr(library, symbol), ctypes.c_void_p).value
                for symbol in ("sgemm_", "dgemm_")
            }
        except (OSError, AttributeError):
            return None
    return None
