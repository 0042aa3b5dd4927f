"""Module-level Warp kernels of the course generator and of the course env (private)."""
