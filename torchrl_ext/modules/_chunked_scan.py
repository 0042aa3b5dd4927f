"""The chunked layout of a resettable diagonal linear recurrence over ``[R, T]`` rows.

A scan memory's trace follows ``h_t = link_t * coef * h_{t-1} + b_t`` (``coef`` a time-invariant
diagonal, ``link_t`` 0 where a row restarts, else 1). Computed one step at a time, that is ``T``
dependent steps. Here the rows are cut into ``N`` chunks of ``C`` steps (``C`` near
``sqrt(T)``) and stored chunk-position-major, ``[C, R, N, ...]`` with ``t = n * C + j``, so
that one tensor operation advances every chunk of every row by one step: ``C`` such steps give
each chunk's trace from a zero start, ``N`` small sequential steps carry the value at each
chunk's end into the next one (:func:`carry_into_chunks`), and one more operation per chunk
position adds the carried value, decayed, to every step: ``O(T)`` work in about ``2 C + N``
Python-level steps. The same layout runs the reverse recurrence of the backward pass.
"""

from __future__ import annotations

import math

import torch

__all__ = ["ChunkLayout", "carry_into_chunks", "chunk_length", "decay_powers", "reach"]


def chunk_length(n_steps: int) -> int:
    """The chunk length ``C`` for rows of ``n_steps``: a divisor of it near its square root.

    A divisor within a factor 2 of ``sqrt(n_steps)`` spares the padding; without one, the
    rounded square root (the last chunk is then padded).
    """
    if n_steps <= 1:
        return 1
    root = math.sqrt(n_steps)
    divisors = [d for d in range(math.ceil(root / 2), int(2 * root) + 1) if n_steps % d == 0]
    if divisors:
        return min(divisors, key=lambda d: abs(d - root))
    return round(root)


class ChunkLayout:
    """Where step ``t`` of row ``r`` lives in the ``[C, R, N, ...]`` layout.

    Args:
        n_rows (int): ``R``.
        n_steps (int): ``T``; rows are padded at their end to ``N * C`` steps.
    """

    def __init__(self, n_rows: int, n_steps: int):
        self.n_rows = n_rows
        self.n_steps = n_steps
        self.length = chunk_length(n_steps)
        self.count = -(-n_steps // self.length)
        self.padded_steps = self.count * self.length

    def to_chunks(self, rows: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """``[R, T, ...]`` as a contiguous ``[C, R, N, ...]`` tensor (zeros as padding).

        Written into ``out`` when given, else into a new tensor.
        """
        pad = self.padded_steps - self.n_steps
        if pad:
            rows = torch.cat([rows, rows.new_zeros(self.n_rows, pad, *rows.shape[2:])], 1)
        chunked = rows.reshape(self.n_rows, self.count, self.length, *rows.shape[2:])
        chunked = chunked.movedim(2, 0)
        return chunked.contiguous() if out is None else out.copy_(chunked)

    def from_chunks(self, chunks: torch.Tensor) -> torch.Tensor:
        """``[C, R, N, ...]`` back to ``[R, T, ...]`` (a view when nothing was padded)."""
        rows = chunks.movedim(0, 2).reshape(self.n_rows, self.padded_steps, *chunks.shape[3:])
        return rows[:, : self.n_steps]

    def step_view(self, rows: torch.Tensor, j: int) -> torch.Tensor:
        """Steps ``j, j + C, ...`` of ``[R, N * C, ...]`` rows, as an ``[R, N, ...]`` view."""
        return rows.view(self.n_rows, self.count, self.length, *rows.shape[2:])[:, :, j]

    def links(self, starts: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``[C, R, N]``: 0 where ``starts`` (bool ``[R, T]``) is set and on padding, else 1."""
        return self.to_chunks((~starts).to(dtype).unsqueeze(-1)).squeeze(-1)

    def positions(self, rows: torch.Tensor, steps: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The ``(j, r, n)`` index of each ``(row, step)`` pair."""
        return steps % self.length, rows, steps // self.length

    def by_position(
        self, rows: torch.Tensor, steps: torch.Tensor
    ) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """For each chunk position ``j``: the ``(r, n, k)`` of the pairs ``k`` found there."""
        j = steps % self.length
        order = torch.argsort(j, stable=True)
        counts = torch.bincount(j, minlength=self.length).tolist()
        groups, offset = [], 0
        for count in counts:
            k = order[offset : offset + count]
            groups.append((rows[k], steps[k] // self.length, k))
            offset += count
        return groups


def reach(links: torch.Tensor, reverse: bool) -> torch.Tensor:
    """``[C, R, N, 1, ...]``: whether each step still sees its chunk's entry value.

    Forward, the product of the links from the chunk's first step to the step; in reverse, from
    the step to the chunk's last one.
    """
    if reverse:
        return links.flip(0).cumprod(0).flip(0)
    return links.cumprod(0)


def decay_powers(coef: torch.Tensor, length: int, reverse: bool) -> torch.Tensor:
    """``[C, ...]``: ``coef ** (j + 1)`` forward, ``coef ** (C - j)`` in reverse."""
    powers = coef.expand(length, *coef.shape).cumprod(0)
    return powers.flip(0) if reverse else powers


def carry_into_chunks(
    local: torch.Tensor, reached: torch.Tensor, powers: torch.Tensor, reverse: bool
) -> torch.Tensor:
    """``[R, N, ...]``: the trace value entering each chunk, one chunk after the other.

    Args:
        local (torch.Tensor): ``[C, R, N, ...]``, each chunk's trace from a zero entry value.
        reached (torch.Tensor): :func:`reach` of the links.
        powers (torch.Tensor): :func:`decay_powers` of the coefficient.
        reverse (bool): chunks enter from the next chunk (the backward pass) instead of the
            previous one.
    """
    length, _, count = local.shape[:3]
    carried = local.new_zeros(local.shape[1], count, *local.shape[3:])
    exit_step, order, source = (0, range(count - 2, -1, -1), 1)
    if not reverse:
        exit_step, order, source = (length - 1, range(1, count), -1)
    for n in order:
        before = n + source
        decayed = carried[:, before] * reached[exit_step, :, before]
        torch.addcmul(local[exit_step, :, before], decayed, powers[exit_step], out=carried[:, n])
    return carried
