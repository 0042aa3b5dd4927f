"""Module-level Warp kernels and functions used by the environments (private)."""
