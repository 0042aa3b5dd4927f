"""Matrix products of the backward passes, laid out for the CPU BLAS.

A linear layer's weight gradient is ``grad.T @ inputs`` (``[N, G]`` and ``[N, n]`` give
``[G, n]``). With torch's CPU BLAS (MKL), a row-major result with few columns runs several
times slower than the same product laid out with few rows: at ``N = 1024``, ``G = 256`` and
``n = 8`` (a memory reading a one-hot observation), 5x; the other way round (inputs wider than
the gradient, ``G = 32``, ``n = 256``) the plain layout is the faster one, by about a sixth.
:func:`weight_grad` computes the product with the narrower operand's columns as the result's
rows.
"""

from __future__ import annotations

import torch

__all__ = ["weight_grad"]


def weight_grad(grad: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    """``grad.T @ inputs`` for 2-D ``grad`` ``[N, G]`` and ``inputs`` ``[N, n]``: ``[G, n]``.

    Where ``n < G`` the result is a transposed view of ``inputs.T @ grad``.

    Examples:
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> grad, inputs = torch.randn(5, 4, dtype=torch.float64), torch.randn(5, 2).double()
        >>> torch.allclose(weight_grad(grad, inputs), grad.T @ inputs)
        True
    """
    if inputs.shape[1] < grad.shape[1]:
        return (inputs.t() @ grad).t()
    return grad.t() @ inputs
