"""Compiled kernels of the objectives, one job per module (private).

* :mod:`.gae_recursion`: the GAE recursion, a numba kernel for the CPU and a Warp kernel for CUDA.
* :mod:`.segment_plan`: the segment plan of the recurrent value recompute (numba, CPU).

Each has a plain-torch reference next to its caller, which the tests use as the oracle.
"""
