"""Compiled kernels of the modules, one job per module (private).

* :mod:`.recurrent_cells`: one LSTM or GRU layer over rows with state resets, forward and
  backward (numba, CPU).

The plain path next to them is :mod:`torchrl_ext.modules._packed`; the tests check both against
a ``torch.nn`` cell loop.
"""
