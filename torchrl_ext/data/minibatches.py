"""Env-major minibatches: shuffle env indices, never timesteps, and hand out whole rows.

A recurrent learner needs each minibatch row to be one env's contiguous ``[T]`` stretch so the
hidden state can be rebuilt from ``is_init``. Both helpers below draw a permutation of the env
indices once per epoch from a :class:`torch.Generator`, then cut it into chunks of
``envs_per_minibatch`` envs (the last chunk is shorter when the env count is not divisible):
every env appears exactly once per epoch.

* :class:`EnvMajorMinibatches` iterates over a ``[N_env, T]`` TensorDict in memory.
* :class:`EnvMajorSampler` is a torchrl replay-buffer sampler over a storage built with
  ``ndim=2`` and extended with ``[N_env, T]`` batches (torchrl stores those time-first, as
  ``[T, N_env]``, extending along time; the sampler indexes that layout and returns
  ``[E, T]`` rows).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDictBase
from torchrl.data.replay_buffers.samplers import Sampler
from torchrl.data.replay_buffers.storages import Storage

from torchrl_ext._checks import check_bool, check_int
from torchrl_ext._compat import sampler_buffer_generator
from torchrl_ext.data.safe_loading import load_plain

_STATE_KEYS = ("chunks", "shape", "ran_out")


def _check_generator(generator: torch.Generator | None) -> torch.Generator | None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator or None, got {type(generator).__name__}."
        )
    return generator


def env_chunks(
    n_envs: int,
    envs_per_minibatch: int,
    generator: torch.Generator | None,
    device=None,
    shuffle: bool = True,
) -> list[torch.Tensor]:
    """One epoch of env indices cut into chunks (last one possibly shorter).

    The indices are a fresh permutation, or ``0 .. n_envs - 1`` in order without ``shuffle``.
    """
    if shuffle:
        order = torch.randperm(n_envs, generator=generator, device=device)
    else:
        order = torch.arange(n_envs, device=device)
    return list(order.split(envs_per_minibatch))


class EnvMajorMinibatches:
    """Iterates over whole env rows of a ``[N_env, T, ...]`` TensorDict, envs shuffled.

    Each epoch draws a fresh permutation of the env indices (dim 0) and yields
    ``data[chunk]`` for consecutive chunks of ``envs_per_minibatch`` envs, so every env appears
    exactly once per epoch, rows keep all their timesteps in order, and the last minibatch is
    shorter when ``N_env`` is not divisible. Iterating again continues with new permutations.
    With ``shuffle=False`` every epoch takes the envs in their natural order ``0 .. N_env - 1``
    (deterministic minibatches, e.g. for debugging or for a value pass over the whole batch).

    Args:
        data (TensorDictBase): the batch, env dim first (``batch_dims >= 2``) and holding at
            least one env (a batch of 0 envs is refused: an epoch over it would be empty).
        envs_per_minibatch (int): envs per minibatch, ``>= 1``. ``0`` is refused rather than
            rounded up, since a minibatch of no envs holds no data; values above ``N_env``
            give one minibatch of all envs per epoch.
        epochs (int, optional): passes over the envs per pass over the iterator. Defaults to
            ``1``.
        shuffle (bool, optional): draw a fresh permutation of the envs each epoch. Defaults to
            ``True``.
        generator (torch.Generator, optional): source of the permutations. Defaults to
            ``None`` (torch's default generator).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext.data.minibatches import EnvMajorMinibatches
        >>> data = TensorDict({"obs": torch.arange(5 * 4).view(5, 4)}, batch_size=[5, 4])
        >>> mb = EnvMajorMinibatches(data, 2, epochs=2, generator=torch.Generator().manual_seed(0))
        >>> len(mb), [tuple(b.batch_size) for b in mb]
        (6, [(2, 4), (2, 4), (1, 4), (2, 4), (2, 4), (1, 4)])
        >>> rows = torch.cat([b["obs"][:, 0] for b in mb][:3])
        >>> sorted((rows // 4).tolist())
        [0, 1, 2, 3, 4]
        >>> [(b["obs"][:, 0] // 4).tolist() for b in EnvMajorMinibatches(data, 2, shuffle=False)]
        [[0, 1], [2, 3], [4]]
    """

    def __init__(
        self,
        data: TensorDictBase,
        envs_per_minibatch: int,
        *,
        epochs: int = 1,
        shuffle: bool = True,
        generator: torch.Generator | None = None,
    ):
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"data must be a TensorDict, got {type(data).__name__}.")
        if data.batch_dims < 2:
            raise ValueError(
                "data must have an env dim and a time dim (batch_dims >= 2), got "
                f"batch_size={tuple(data.batch_size)}."
            )
        if data.batch_size[0] == 0:
            raise ValueError(
                "data must hold at least one env, but its env dim (dim 0) has size 0, got "
                f"batch_size={tuple(data.batch_size)}. Collect at least one env before "
                "making minibatches."
            )
        self.envs_per_minibatch = check_int("envs_per_minibatch", envs_per_minibatch, minimum=1)
        self.epochs = check_int("epochs", epochs, minimum=1)
        self.shuffle = check_bool("shuffle", shuffle)
        self.generator = _check_generator(generator)
        self.data = data

    @property
    def n_envs(self) -> int:
        """Number of env rows in ``data``."""
        return self.data.batch_size[0]

    def __len__(self) -> int:
        return self.epochs * -(-self.n_envs // self.envs_per_minibatch)

    def __iter__(self) -> Iterator[TensorDictBase]:
        for _ in range(self.epochs):
            chunks = env_chunks(
                self.n_envs, self.envs_per_minibatch, self.generator, shuffle=self.shuffle
            )
            for chunk in chunks:
                yield self.data[chunk.to(self.data.device or "cpu")]


class EnvMajorSampler(Sampler):
    """Replay-buffer sampler that returns whole env rows of a ``[N_env, T]`` storage.

    For a storage created with ``ndim=2`` and filled with ``[N_env, T]`` batches (the replay
    buffer's default ``dim_extend``, which stores them as ``[T, N_env]``),
    ``sample(storage, batch_size)`` returns the index of ``batch_size // T`` whole rows:
    ``rb.sample(E * T)`` gives a ``[E, T]`` TensorDict. Envs are drawn without replacement from
    a permutation made once per epoch; the last minibatch of an epoch is shorter when ``N_env``
    is not divisible (a batch size changed within an epoch cuts the rest of its permutation
    anew), after which :attr:`ran_out` is set so that iterating over the replay
    buffer stops at the end of each epoch.

    Args:
        generator (torch.Generator, optional): source of the permutations. Defaults to ``None``
            (the buffer's generator if it has one, else torch's default generator).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import LazyTensorStorage, ReplayBuffer
        >>> from torchrl_ext.data.minibatches import EnvMajorSampler
        >>> data = TensorDict({"obs": torch.arange(5 * 4).view(5, 4)}, batch_size=[5, 4])
        >>> rb = ReplayBuffer(
        ...     storage=LazyTensorStorage(5 * 4, ndim=2),
        ...     sampler=EnvMajorSampler(generator=torch.Generator().manual_seed(0)),
        ...     batch_size=2 * 4,
        ... )
        >>> _ = rb.extend(data)
        >>> batches = list(rb)
        >>> [tuple(b.batch_size) for b in batches]
        [(2, 4), (2, 4), (1, 4)]
        >>> bool((batches[0]["obs"].diff(dim=1) == 1).all())
        True
    """

    def __init__(self, generator: torch.Generator | None = None):
        super().__init__()
        self.generator = _check_generator(generator)
        self._chunks: list[torch.Tensor] = []
        self._shape: tuple[int, ...] | None = None
        self._ran_out = False

    def _rows_per_sample(self, storage: Storage, batch_size: int) -> int:
        shape = tuple(storage.shape) if storage.shape is not None else ()
        if len(shape) != 2:
            raise ValueError(
                "EnvMajorSampler needs a non-empty storage built with ndim=2 (holding [N_env, T] "
                f"batches), got storage shape {shape}."
            )
        steps = shape[0]
        batch_size = check_int("batch_size", batch_size)
        if batch_size < steps or batch_size % steps:
            raise ValueError(
                f"batch_size must be a positive multiple of the row length T={steps} (whole "
                f"rows), got batch_size={batch_size}. Ask for E * {steps} steps to get E rows."
            )
        return batch_size // steps

    def sample(self, storage: Storage, batch_size: int) -> tuple[Any, dict]:
        """Returns the ``(env, time)`` index of the next chunk of whole rows."""
        envs = self._rows_per_sample(storage, batch_size)
        steps, n_envs = shape = tuple(storage.shape)
        if not self._chunks or shape != self._shape:
            generator = self.generator
            if generator is None:
                generator = sampler_buffer_generator(self)
            self._chunks = env_chunks(n_envs, envs, generator)
            self._shape = shape
        elif self._chunks[0].numel() != envs:
            # the batch size changed: the rest of this epoch's permutation, cut to the new size
            # (a short last chunk cuts to itself)
            self._chunks = list(torch.cat(self._chunks).split(envs))
        rows = self._chunks.pop(0)
        self._ran_out = not self._chunks
        time = torch.arange(steps)
        index = (time[None, :].expand(rows.numel(), -1), rows[:, None].expand(-1, steps))
        return index, {}

    @property
    def ran_out(self) -> bool:
        """Whether the last call handed out the final chunk of an epoch."""
        return self._ran_out

    @ran_out.setter
    def ran_out(self, value: bool) -> None:
        self._ran_out = value

    def _empty(self) -> None:
        self._chunks = []
        self._shape = None
        self._ran_out = False

    def state_dict(self) -> dict[str, Any]:
        """Remaining chunks of the current epoch."""
        return OrderedDict(
            chunks=[c.clone() for c in self._chunks],
            shape=self._shape,
            ran_out=self._ran_out,
        )

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores the state returned by :meth:`state_dict`.

        The state is validated in full before anything changes: ``shape`` is ``None`` (no
        epoch under way, no chunks) or the storage shape ``(T, N_env)``; ``chunks`` are
        non-empty 1-D integer env ids in ``[0, N_env)``, each id at most once (they are the
        rest of one permutation); ``ran_out`` is a bool.

        Raises:
            TypeError: if the state or one of its entries has the wrong type.
            ValueError: if an entry is missing or holds values outside the above.
        """
        chunks, shape, ran_out = _validated_state(state_dict)
        self._chunks = chunks
        self._shape = shape
        self._ran_out = ran_out

    def dumps(self, path: str | Path) -> None:
        """Saves the state under ``path``."""
        path = Path(path)
        path.mkdir(exist_ok=True, parents=True)
        torch.save(self.state_dict(), path / "sampler.pt")

    def loads(self, path: str | Path) -> None:
        """Loads the state saved by :meth:`dumps`.

        ``sampler.pt`` is read with ``weights_only=True``
        (:func:`~torchrl_ext.data.safe_loading.load_plain`): a file holding anything but
        tensors and plain data is refused with a :class:`ValueError` naming it.
        """
        self.load_state_dict(load_plain(Path(path) / "sampler.pt"))


def _validated_state(
    state_dict: Any,
) -> tuple[list[torch.Tensor], tuple[int, int] | None, bool]:
    """Checks an :class:`EnvMajorSampler` state; returns ``(chunks, shape, ran_out)``."""
    if not isinstance(state_dict, Mapping):
        raise TypeError(
            "state_dict must be a mapping as returned by EnvMajorSampler.state_dict(), got "
            f"{type(state_dict).__name__}."
        )
    missing = [key for key in _STATE_KEYS if key not in state_dict]
    if missing:
        raise ValueError(
            f"state_dict lacks the entries {missing}; expected the keys {list(_STATE_KEYS)} "
            "as returned by EnvMajorSampler.state_dict()."
        )
    shape = _validated_shape(state_dict["shape"])
    ran_out = check_bool("state_dict['ran_out']", state_dict["ran_out"])
    raw = state_dict["chunks"]
    if isinstance(raw, (str, bytes)) or not isinstance(raw, Iterable):
        raise TypeError(f"state_dict['chunks'] must be a list of tensors, got chunks={raw!r}.")
    chunks = [_validated_chunk(i, chunk) for i, chunk in enumerate(raw)]
    if chunks and shape is None:
        raise ValueError(
            "state_dict holds chunks but shape=None: the env count they index is unknown. "
            "Pass the state as returned by EnvMajorSampler.state_dict()."
        )
    if chunks:
        _check_env_ids(torch.cat(chunks), shape[1])
    return chunks, shape, ran_out


def _validated_shape(shape: Any) -> tuple[int, int] | None:
    if shape is None:
        return None
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Iterable):
        raise TypeError(
            f"state_dict['shape'] must be None or the storage shape (T, N_env), got {shape=!r}."
        )
    shape = tuple(shape)
    if len(shape) != 2:
        raise ValueError(
            f"state_dict['shape'] must be None or the storage shape (T, N_env), got {shape=!r}."
        )
    steps = check_int("state_dict['shape'][0]", shape[0], minimum=1)
    return steps, check_int("state_dict['shape'][1]", shape[1], minimum=1)


def _validated_chunk(i: int, chunk: Any) -> torch.Tensor:
    name = f"state_dict['chunks'][{i}]"
    if isinstance(chunk, torch.Tensor):
        tensor = chunk.detach().clone().cpu()
    else:
        try:
            tensor = torch.as_tensor(chunk)
        except (TypeError, ValueError, RuntimeError) as err:
            raise TypeError(f"{name} must be a 1-D tensor of env ids, got {chunk!r}.") from err
    if tensor.is_floating_point() or tensor.is_complex() or tensor.dtype is torch.bool:
        raise TypeError(f"{name} must hold integer env ids, got dtype={tensor.dtype}.")
    if tensor.ndim != 1 or tensor.numel() == 0:
        raise ValueError(
            f"{name} must be a non-empty 1-D tensor of env ids, got shape {tuple(tensor.shape)}."
        )
    return tensor.long()


def _check_env_ids(ids: torch.Tensor, n_envs: int) -> None:
    bad = ids[(ids < 0) | (ids >= n_envs)]
    if bad.numel():
        raise ValueError(
            f"state_dict['chunks'] holds env ids {bad.tolist()} outside [0, {n_envs}) for "
            f"shape[1]={n_envs} envs."
        )
    if ids.unique().numel() != ids.numel():
        raise ValueError(
            f"state_dict['chunks'] repeats env ids ({ids.tolist()}); the chunks of an epoch "
            "hold each env at most once."
        )


__all__ = ["EnvMajorMinibatches", "EnvMajorSampler"]
