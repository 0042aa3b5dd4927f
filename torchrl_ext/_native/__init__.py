"""Low-level helpers shared by the compiled kernels of several subpackages (private)."""
