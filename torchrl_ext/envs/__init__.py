"""Batched TorchRL environments whose state lives in NVIDIA Warp arrays."""

__all__: list[str] = []
