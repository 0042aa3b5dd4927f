"""Matrix products of the backward passes, laid out for the CPU BLAS.

A linear layer's weight gradient is ``grad.T @ inputs`` (``[N, G]`` and ``[N, n]`` give
``[G, n]``). With torch's CPU BLAS (MKL), a row-major result with few columns runs several
times slower than the same product laid out with few rows: at ``N = 1024``, ``G = 256`` and
``n = 8`` (a memory reading a one-hot observation), 5x. :func:`weight_grad` computes the
transpose of ``inputs.T @ grad`` instead, which is never slower by more than the noise.
"""

from __future__ import annotations

import torch

__all__ = ["weight_grad"]


def weight_grad(grad: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    """``grad.T @ inputs`` for 2-D ``grad`` ``[N, G]`` and ``inputs`` ``[N, n]``: ``[G, n]``.

    The result is a transposed view of a contiguous ``[n, G]`` tensor.
    """
    return (inputs.t() @ grad).t()
