"""Thin helpers over TorchRL's Ray backends: a shareable, prioritized, sequence-replay service.

TorchRL serves a replay buffer from a Ray actor (``RayReplayBuffer``, or any buffer built with
``service_backend="ray"``) and collects from Ray actors (``RayCollector``). These helpers fill
the two gaps that stop a recurrent Ape-X / R2D2 layout from using them as they are: a
prioritized TensorDict buffer served by Ray, and a buffer object that can be handed to remote
writers; and a fast path for the learner's samples (one flat array, written into a
shared-memory file of the learner on the service's node and moved by Ray's object store
elsewhere, optionally prefetched). Importing this package does not import
Ray; building a buffer does.
"""

from torchrl_ext.distributed.packing import (
    PackedSampleReplayBuffer,
    PackedTensorDict,
    pack_tensordict,
    unpack_tensordict,
)
from torchrl_ext.distributed.replay import (
    SamplePrefetcher,
    ShareableRayReplayBuffer,
    prioritized_ray_buffer,
)

__all__ = [
    "PackedSampleReplayBuffer",
    "PackedTensorDict",
    "SamplePrefetcher",
    "ShareableRayReplayBuffer",
    "pack_tensordict",
    "prioritized_ray_buffer",
    "unpack_tensordict",
]
