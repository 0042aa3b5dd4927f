"""The one door to TorchRL, TensorDict and torch internals.

Every private upstream name the package relies on is reached through a named accessor here, with
one line on why it is needed and which public API would replace it. Keeping them in one module
means an upstream upgrade is checked in one place: run the tests against the nightlies
(``scripts/test_nightly.sh``) and read this module. ``test/test_compat.py`` fails when a
private TorchRL, TensorDict or torch name is used anywhere else in the package.

Overriding the extension points upstream classes document (``EnvBase._step``, ``_reset``,
``_set_seed``, ``Transform._call``) is the subclassing contract, not a use of internals. Two
overrides go further and are read together with this module on an upgrade:
``WarpEnv._step_and_maybe_reset`` and ``WarpEnv._reset_check_done`` (see
:func:`env_step_and_maybe_reset`, :func:`env_reset_check_done`), and
``BaseEnvState._save_to_state_dict``/``_load_from_state_dict`` (``torch.nn.Module``'s hooks for
state a module holds outside its parameters and buffers).
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
    "buffer_sample_unit",
    "collector_carrier",
    "env_reset_check_done",
    "env_step_and_maybe_reset",
    "env_step_mdp",
    "has_kwargs_in_keys",
    "has_post_step_hooks",
    "native_autoreset",
    "new_tensordict_unchecked",
    "ray_buffer_actor",
    "rnn_flat_weights",
    "rnn_op",
    "sampler_buffer_generator",
    "set_unchecked",
    "storage_attached_entities",
    "storage_contents",
    "storage_last_write",
    "storage_mutation_revision",
    "tensordict_entries",
    "tensordict_has_names",
    "writer_cursor",
]


# -- TensorDict ----------------------------------------------------------------------------


def new_tensordict_unchecked(
    source: dict, batch_size: torch.Size, device: torch.device | None
) -> TensorDict:
    """A TensorDict of ``source`` without validating its entries.

    Why: an env's outputs are fresh tensors it shaped itself; validation costs about as much as
    the step. Public replacement: ``TensorDict(source, batch_size, device)`` (validating).
    """
    return TensorDict._new_unsafe(source, batch_size=batch_size, device=device)


def tensordict_entries(tensordict: TensorDict) -> dict[str, Any]:
    """The dict of a ``TensorDict``'s own entries (values are tensors or nested TensorDicts).

    Why: the fast storage read checks by identity that the stored entries are still those it
    planned for, without building anything. Public replacement: ``dict(tensordict.items())``
    (a new dict on every read).
    """
    return tensordict._tensordict


def tensordict_has_names(tensordict: TensorDict) -> bool:
    """Whether any batch dim of ``tensordict`` is named.

    Why: the fast storage read builds samples without dim names, so it steps aside for named
    contents. Public replacement: ``any(n is not None for n in tensordict.names)``.
    """
    return tensordict._has_names()


def set_unchecked(tensordict: TensorDictBase, key: Any, value: torch.Tensor) -> None:
    """Set an entry the caller built with the right batch size and device, unvalidated.

    Why: the fast setter ``EnvBase.any_done`` itself uses for values it made. Public replacement:
    ``tensordict.set(key, value)``, used for non-TensorDict inputs and nested keys.
    """
    if isinstance(tensordict, TensorDict) and isinstance(key, str):
        tensordict._set_str(key, value, validated=True, inplace=False, non_blocking=False)
    else:
        tensordict.set(key, value)


# -- envs ------------------------------------------------------------------------------------


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


# -- replay buffers -------------------------------------------------------------------------


def storage_contents(storage: Any) -> Any:
    """What a TorchRL storage holds (a TensorDict for a ``TensorStorage``), ``None`` before init.

    Why: done flags and trajectory ids are read in place, without copying the capacity, and
    the fast read plans on the stored TensorDict. Public replacement: ``storage.get(index)``
    (copies what it reads).
    """
    return getattr(storage, "_storage", None)


def storage_last_write(storage: Any) -> Any:
    """The index the storage's last write went to (``None`` before any write).

    Why: the newest record of a full ring buffer is the write seam that no window crosses.
    Public replacement: none in TorchRL 0.14.
    """
    return storage._last_cursor_index


def buffer_sample_unit(buffer: Any) -> Any:
    """The sample unit a replay buffer expands its anchors with (``None`` for other objects).

    Why: a ``Sequence`` unit routes the priority calls of the buffers that sample through it,
    and TorchRL neither tells a unit which buffer it serves nor exposes the buffer's unit.
    Public replacement: none in TorchRL 0.14 (a ``rb.sample_unit`` property, or a hook called
    when a unit is given to a buffer).
    """
    return getattr(buffer, "_sample_unit", None)


def storage_attached_entities(storage: Any) -> Any:
    """The buffers (and samplers) attached to ``storage``.

    Why: ``loads`` restores the writer's cursor but not the storage's last write, so the seam
    is read from the attached buffers' writers too; and a ``Sequence`` unit finds the buffers it
    samples for among them. Public replacement: none in TorchRL 0.14.
    """
    return storage._attached_entities


def writer_cursor(writer: Any) -> Any:
    """A round-robin writer's cursor (the next index it writes), ``None`` for other writers.

    Why: see :func:`storage_attached_entities`. Public replacement: none in TorchRL 0.14
    (``writer.state_dict()["_cursor"]`` holds it, at the cost of a dict per read).
    """
    return getattr(writer, "_cursor", None)


def storage_mutation_revision(storage: Any) -> Any:
    """A counter the storage advances on every write, whoever made it.

    Why: a trajectory index is rebuilt when records were written without the buffer's writer
    telling the sample unit. Public replacement: none in TorchRL 0.14.
    """
    return storage._mutation_revision


def sampler_buffer_generator(sampler: Any) -> torch.Generator | None:
    """The generator the replay buffer handed its sampler (``ReplayBuffer(generator=...)``).

    Why: a sampler of a seeded buffer draws from the buffer's generator, as TorchRL's samplers
    do. Public replacement: none in TorchRL 0.14.
    """
    return sampler._rng


def ray_buffer_actor(buffer: Any) -> Any:
    """The Ray actor behind a ``RayReplayBuffer``; ``None`` once the buffer is closed.

    Why: the packed and shared-memory samples are methods of our actor class, which the
    client does not forward. Public replacement: none in TorchRL 0.14.
    """
    return getattr(buffer, "_rb", None)


# -- collectors and modules ---------------------------------------------------------------


def collector_carrier(collector: Any) -> TensorDictBase:
    """The collector's next policy input (the root of the step it takes next).

    Why: a resumed run continues bitwise only if this is saved and restored with the
    collector, whose ``state_dict`` omits it. Public replacement: none in TorchRL 0.14.
    """
    return collector._carrier


def has_kwargs_in_keys(module: Any) -> bool:
    """Whether a ``TensorDictModule`` got its ``in_keys`` as a dict (so calls with keywords).

    Why: the value pass calls plain modules on positional tensors. Public replacement: none.
    """
    return module._kwargs is not None


def rnn_op(is_lstm: bool) -> Any:
    """The ATen op ``nn.LSTM.forward`` (``is_lstm``) or ``nn.GRU.forward`` runs.

    Why: called with the layer's own weights and settings, it skips ``forward``'s Python
    checks on a call per segment. Public replacement: calling the layer.
    """
    return torch._VF.lstm if is_lstm else torch._VF.gru


def rnn_flat_weights(layer: torch.nn.RNNBase) -> list[torch.Tensor]:
    """A recurrent layer's weights in the order :func:`rnn_op` takes them.

    Why: see :func:`rnn_op`. Public replacement: ``[w for ws in layer.all_weights for w in
    ws]`` (rebuilt on every call).
    """
    return layer._flat_weights


# -- torch's native libraries -------------------------------------------------------------


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
