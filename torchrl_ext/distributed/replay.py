"""A prioritized sequence-replay service on Ray, shareable with remote writers.

Two things stop TorchRL's Ray replay layer (written against torchrl 0.14.1) from serving an
Ape-X / R2D2 layout as it is:

- ``TensorDictPrioritizedReplayBuffer(..., service_backend="ray")`` fails while building its
  actor (``__init__() got an unexpected keyword argument 'delayed_init'``).
  :func:`prioritized_ray_buffer` builds the same buffer the way the Ray layer accepts: a
  ``TensorDictReplayBuffer`` whose sampler is a ``PrioritizedSampler`` constructor. This can go
  once the stock call builds its actor: the buffer is then TorchRL's own, and only the packed
  sample remains ours.
- A ``RayReplayBuffer`` cannot be passed to a remote task or actor: pickling it fails
  (``'RayReplayBuffer' object has no attribute '_futures_lock'``).
  :class:`ShareableRayReplayBuffer` pickles as its public ``client()`` instead, which extends,
  samples and updates priorities through the same actor but cannot close it. This can go once
  a ``RayReplayBuffer`` pickles (as a client or otherwise) in a TorchRL release.

``TestTorchRLRayGaps`` in ``test/distributed/test_replay.py`` asserts both failures, so the
test suite says when a TorchRL upgrade fixes one.

One thing makes it slow for a learner: a sample travels back as a pickled TensorDict, entry by
entry. The actor of :func:`prioritized_ray_buffer` (a :class:`PackedSampleReplayBuffer`) also
returns a sample as one flat array: written straight into a shared-memory file of the learner
when both run on one node, else moved by Ray's object store.
:meth:`ShareableRayReplayBuffer.sample` takes that path and rebuilds the same TensorDict, and
:class:`SamplePrefetcher` keeps the next samples on their way while the learner trains.

Everything else is TorchRL's: the actor, its transport, its ``dumps``/``loads`` checkpoints.
"""

from __future__ import annotations

import warnings
import weakref
from collections import deque
from functools import partial
from typing import Any

from tensordict import TensorDictBase
from torchrl.data import PrioritizedSampler, ReplayBuffer
from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer
from torchrl.data.replay_buffers.sample_units import SampleUnit

from torchrl_ext._checks import check_float, check_int, check_key, check_optional_int
from torchrl_ext._compat import ray_buffer_actor
from torchrl_ext.data.storages import FastLazyTensorStorage
from torchrl_ext.distributed.packing import (
    PackedSampleReplayBuffer,
    _packing_supported,
    packed_nbytes,
    unpack_tensordict,
)
from torchrl_ext.distributed.slots import SlotPool


class ShareableRayReplayBuffer(RayReplayBuffer):
    """A ``RayReplayBuffer`` that can be handed to remote tasks and actors.

    Pickling (which Ray does to every argument of a remote call) turns it into the buffer's
    ``client()``: a handle that extends, samples, updates priorities and reads the length
    through the same Ray actor, without the right to close it. The process that built the
    buffer keeps that right (:meth:`close`). Construction is ``RayReplayBuffer``'s; see
    :func:`prioritized_ray_buffer` for a prioritized sequence-replay service.

    When the served class is a :class:`PackedSampleReplayBuffer` (as
    :func:`prioritized_ray_buffer` builds it) and the transport is Ray's, :meth:`sample`
    fetches the sample packed into one flat array and rebuilds it here: the same TensorDict
    as ``RayReplayBuffer.sample`` returns, in less time for samples of many entries (see
    :doc:`/scaling`). On the service's node the array is written into a shared-memory file
    this buffer owns (:class:`~torchrl_ext.distributed.slots.SlotPool`, deleted by
    :meth:`close`), so it does not pass through Ray's object store.

    Examples:
        >>> import pickle
        >>> import ray
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext import Sequence
        >>> from torchrl_ext.distributed import prioritized_ray_buffer
        >>> _ = ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
        >>> unit = Sequence(length=3, burn_in=1, layout="batch_time")
        >>> rb = prioritized_ray_buffer(
        ...     64, sample_unit=unit, batch_size=2, remote_config={"num_cpus": 0}
        ... )
        >>> writer = pickle.loads(pickle.dumps(rb))  # what a remote writer receives
        >>> done = torch.zeros(10, 1, dtype=torch.bool)
        >>> done[-1] = True
        >>> data = TensorDict({"obs": torch.arange(10.0), ("next", "done"): done}, [10])
        >>> writer.extend(data).tolist()[:3]
        [0, 1, 2]
        >>> sample = rb.sample()  # the learner
        >>> sample.shape, sample["is_init"][:, 0].all().item()
        (torch.Size([2, 4]), True)
        >>> sample["td_error"] = torch.ones(2, 4)
        >>> unit.update_priority(rb, sample)  # reduced here; only anchors travel
        >>> rb.close()
        >>> ray.shutdown()
    """

    def __init__(
        self, *args: Any, replay_buffer_cls: type[ReplayBuffer] = ReplayBuffer, **kwargs: Any
    ) -> None:
        super().__init__(*args, replay_buffer_cls=replay_buffer_cls, **kwargs)
        self._packed = _packing_supported(replay_buffer_cls) and self.transport_kind == "ray"
        self._slots = SlotPool()
        self._warned_slot = False

    def __reduce__(self) -> tuple:
        return (_received, (self.client(),))

    def sample(self, batch_size: int | None = None, *args: Any, **kwargs: Any) -> Any:
        """Samples from the service, as ``RayReplayBuffer.sample`` does.

        Args:
            batch_size (int, optional): anchors to draw. Defaults to the buffer's.
            *args: further arguments of the served buffer's ``sample`` (``return_info``).
            **kwargs: further keyword arguments of the served buffer's ``sample``.

        Returns:
            The sample. With a packing service and no further arguments it travels as one
            flat array (see :class:`PackedSampleReplayBuffer`) and is rebuilt here.
        """
        if not self._packed or args or kwargs:
            return super().sample(batch_size, *args, **kwargs)
        return self._receive(*self._request(batch_size))

    def close(self) -> None:
        """Stops the service (``RayReplayBuffer.close``) and deletes this buffer's slots."""
        self._slots.close()
        super().close()

    def _request(self, batch_size: int | None) -> tuple[Any, str | None]:
        """Asks for a packed sample written into a slot of this buffer; returns both."""
        batch_size = self._checked(batch_size)  # before a slot is taken
        slot = self._slots.acquire()
        try:
            return ray_buffer_actor(self).sample_packed.remote(batch_size, slot), slot
        except BaseException:
            self._slots.retire(slot)
            raise

    def _receive(self, ref: Any, slot: str | None, timeout: float | None = None) -> Any:
        """The sample of ``_request``; its slot is lent again once the sample is copied out."""
        import ray

        try:
            packed = ray.get(ref, timeout=timeout)
            if packed.data is None:
                packed = packed._replace(data=self._slots.read(slot, packed_nbytes(packed)))
            elif slot is not None:
                self._warn_slot_unused()
            sample = unpack_tensordict(packed)
        except BaseException:
            self._slots.retire(slot)  # the service may still write into it
            raise
        self._slots.release(slot)
        return sample

    def _warn_slot_unused(self) -> None:
        """Says once that samples come through Ray's object store, not this node's slots."""
        if not self._warned_slot:
            self._warned_slot = True
            warnings.warn(
                "the replay service cannot write into this learner's /dev/shm slots (it runs "
                "on another node, in another container, or /dev/shm is full): samples travel "
                "through Ray's object store, about 2 ms slower each. Run the service on the "
                "learner's node for the fast path (see the Scaling out page).",
                RuntimeWarning,
                stacklevel=4,
            )

    def request_sample(self, batch_size: int | None = None) -> Any:
        """Asks the service for a packed sample without waiting for it.

        Args:
            batch_size (int, optional): anchors to draw. Defaults to the buffer's.

        Returns:
            A Ray ``ObjectRef`` of a :class:`~torchrl_ext.distributed.PackedTensorDict`;
            ``unpack_tensordict(ray.get(ref))`` is the sample. It travels through Ray's
            object store; :meth:`sample` and :class:`SamplePrefetcher` use this buffer's
            shared-memory slots instead where the service runs on the same node.
        """
        batch_size = self._checked(batch_size)
        return ray_buffer_actor(self).sample_packed.remote(batch_size)

    def _checked(self, batch_size: int | None) -> int | None:
        """``batch_size`` checked, for a live service that can pack samples."""
        if ray_buffer_actor(self) is None:
            raise RuntimeError("the replay service was closed; build a new buffer to sample.")
        if not self._packed:
            raise RuntimeError(
                "a packed sample needs a service built with "
                "replay_buffer_cls=PackedSampleReplayBuffer and transport='ray' "
                "(prioritized_ray_buffer builds one)."
            )
        return check_optional_int("batch_size", batch_size, minimum=1)


def _received(client: Any) -> Any:
    """Unpickles a :class:`ShareableRayReplayBuffer`: its client, as it was sent."""
    return client


class SamplePrefetcher:
    """Keeps the learner's next samples on their way while it trains on the current one.

    Each :meth:`sample` returns the oldest sample requested and requests a new one, so
    ``depth`` samples are always in flight; the learner waits only when the service is
    slower than its own step. A prefetched sample is drawn with the priorities the service
    held when it was drawn: the priority updates of the last ``depth`` samples reach later
    draws only (a staleness of ``depth`` updates). Extends, priority updates and checkpoints
    go through the buffer itself, as before. :meth:`close` (or garbage collection) drops the
    samples in flight.

    Args:
        buffer (ShareableRayReplayBuffer): a packing service, as
            :func:`prioritized_ray_buffer` builds.
        depth (int, optional): samples kept in flight, ``>= 1``. Defaults to 1.
        batch_size (int, optional): anchors per sample. Defaults to the buffer's.
        timeout (float, optional): seconds :meth:`sample` waits at most. Defaults to
            ``None`` (no limit).

    Examples:
        >>> import ray
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext import Sequence
        >>> from torchrl_ext.distributed import SamplePrefetcher, prioritized_ray_buffer
        >>> _ = ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
        >>> unit = Sequence(length=3, burn_in=1, layout="batch_time")
        >>> rb = prioritized_ray_buffer(
        ...     64, sample_unit=unit, batch_size=2, remote_config={"num_cpus": 0}
        ... )
        >>> done = torch.zeros(10, 1, dtype=torch.bool)
        >>> done[-1] = True
        >>> _ = rb.extend(TensorDict({"obs": torch.arange(10.0), ("next", "done"): done}, [10]))
        >>> prefetcher = SamplePrefetcher(rb, depth=2, timeout=60)
        >>> sample = prefetcher.sample()  # requested when the prefetcher was built
        >>> sample.shape, prefetcher.in_flight
        (torch.Size([2, 4]), 2)
        >>> rb.close()
        >>> ray.shutdown()
    """

    def __init__(
        self,
        buffer: ShareableRayReplayBuffer,
        depth: int = 1,
        batch_size: int | None = None,
        timeout: float | None = None,
    ) -> None:
        if not isinstance(buffer, ShareableRayReplayBuffer):
            raise TypeError(
                f"buffer must be a ShareableRayReplayBuffer, got buffer={type(buffer).__name__}."
            )
        self.depth = check_int("depth", depth, minimum=1)
        self.batch_size = check_optional_int("batch_size", batch_size, minimum=1)
        self.timeout = None if timeout is None else check_float("timeout", timeout, 0.0)
        self.buffer = buffer
        self._pending: deque = deque()
        self._finalizer = weakref.finalize(self, _retire_pending, buffer._slots, self._pending)
        for _ in range(self.depth):
            self._pending.append(buffer._request(self.batch_size))

    @property
    def in_flight(self) -> int:
        """Samples requested and not yet returned."""
        return len(self._pending)

    def sample(self) -> TensorDictBase:
        """The oldest sample in flight; a new one is requested in its place."""
        if not self._finalizer.alive:
            raise RuntimeError("this SamplePrefetcher was closed; build a new one to sample.")
        self._pending.append(self.buffer._request(self.batch_size))
        return self.buffer._receive(*self._pending.popleft(), timeout=self.timeout)

    def close(self) -> None:
        """Drops the samples in flight and the slots they hold (also done when collected)."""
        self._finalizer()


def _retire_pending(slots: Any, pending: deque) -> None:
    """Retires the slots of requests nobody will read: the service may still write into them."""
    while pending:
        _, slot = pending.popleft()
        try:
            slots.retire(slot)
        except ValueError:  # already retired, or the buffer's slots were closed
            pass


def prioritized_ray_buffer(
    capacity: int,
    *,
    sample_unit: SampleUnit | None = None,
    alpha: float = 0.6,
    beta: float = 0.4,
    eps: float = 1e-8,
    storage: type = FastLazyTensorStorage,
    batch_size: int | None = None,
    priority_key: str = "td_error",
    remote_config: dict[str, Any] | None = None,
    ray_init_config: dict[str, Any] | None = None,
) -> ShareableRayReplayBuffer:
    """A prioritized TensorDict replay buffer served by a Ray actor.

    What ``TensorDictPrioritizedReplayBuffer(..., service_backend="ray")`` is meant to build:
    the storage, the ``PrioritizedSampler`` and the sample unit are made inside the actor from
    constructors, so nothing large or process-bound crosses the wire. With a
    :class:`~torchrl_ext.Sequence` unit, samples are windows with all their masks and
    priorities stay per anchor (update them with the unit's
    :meth:`~torchrl_ext.data.Sequence.update_priority`, which reduces the windows in the learner
    and sends only anchors and priorities to the service).

    Args:
        capacity (int): records the storage holds, ``>= 1``.
        sample_unit (SampleUnit, optional): expands sampled anchors, e.g.
            ``Sequence(length, burn_in=..., layout="batch_time")``. Defaults to ``None``
            (one record per draw).
        alpha (float, optional): priority exponent, ``>= 0``. Defaults to 0.6.
        beta (float, optional): importance-weight exponent, ``>= 0``. Defaults to 0.4.
        eps (float, optional): added to every priority, ``>= 0``. Defaults to 1e-8.
        storage (type, optional): storage class, called as ``storage(capacity)`` in the actor.
            Defaults to :class:`~torchrl_ext.data.FastLazyTensorStorage`.
        batch_size (int, optional): anchors per :meth:`sample`. Defaults to ``None``.
        priority_key (str, optional): the entry of a sample that holds priorities.
            Defaults to ``"td_error"``.
        remote_config (dict, optional): ``ray.remote`` options of the actor (resources,
            ``max_restarts``). Defaults to TorchRL's.
        ray_init_config (dict, optional): ``ray.init`` arguments when Ray is not started yet.
            Defaults to TorchRL's.

    Returns:
        The buffer; pass it to remote writers as it is (they receive its client).

    Examples:
        >>> from torchrl_ext.distributed import prioritized_ray_buffer
        >>> prioritized_ray_buffer(0)  # arguments are checked before Ray starts
        Traceback (most recent call last):
        ...
        ValueError: capacity must be >= 1, got capacity=0.

        :class:`ShareableRayReplayBuffer` shows a whole round trip: writer, learner, priorities.
    """
    capacity = check_int("capacity", capacity, minimum=1)
    alpha = check_float("alpha", alpha, 0.0)
    beta = check_float("beta", beta, 0.0)
    eps = check_float("eps", eps, 0.0)
    priority_key = check_key("priority_key", priority_key)
    batch_size = check_optional_int("batch_size", batch_size, minimum=1)
    if not callable(storage):
        raise TypeError(f"storage must be a storage class, got storage={storage!r}.")
    if sample_unit is not None and not isinstance(sample_unit, SampleUnit):
        raise TypeError(f"sample_unit must be a SampleUnit, got sample_unit={sample_unit!r}.")
    return ShareableRayReplayBuffer(
        replay_buffer_cls=PackedSampleReplayBuffer,
        storage=partial(storage, capacity),
        sampler=partial(PrioritizedSampler, capacity, alpha, beta, eps),
        sample_unit=sample_unit,
        batch_size=batch_size,
        priority_key=priority_key,
        remote_config=remote_config,
        ray_init_config=ray_init_config,
    )
