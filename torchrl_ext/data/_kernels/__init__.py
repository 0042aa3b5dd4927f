"""Compiled (numba) helpers of the replay side, one job per module (private).

* :mod:`.windows`: window expansion in storage order, for CPU storages with done flags.
* :mod:`.gather`: the row gather of long CPU reads.

Each has a plain-torch counterpart that serves every other case and that the tests compare
it with.
"""
