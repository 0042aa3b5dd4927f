"""Thin helpers over TorchRL's Ray backends: a shareable, prioritized, sequence-replay service.

TorchRL serves a replay buffer from a Ray actor (``RayReplayBuffer``, or any buffer built with
``service_backend="ray"``) and collects from Ray actors (``RayCollector``). These helpers fill
the two gaps that stop a recurrent Ape-X / R2D2 layout from using them as they are: a
prioritized TensorDict buffer served by Ray, and a buffer object that can be handed to remote
writers. Importing this package does not import Ray; building a buffer does.
"""

from torchrl_ext.distributed.replay import (
    ShareableRayReplayBuffer,
    prioritized_ray_buffer,
)

__all__ = ["ShareableRayReplayBuffer", "prioritized_ray_buffer"]
