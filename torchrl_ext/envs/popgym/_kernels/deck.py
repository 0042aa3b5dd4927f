"""Decks of cards in Warp: per-env shuffles and the suit, rank and colour of a card.

A deck of ``num_decks`` standard decks holds ``52 * num_decks`` cards with ids ``0 .. N-1``, laid
out as POPGym's ``Deck``: card ``c`` has suit ``c % 4``, rank ``(c // 4) % 13`` (0 is the ace)
and colour ``c % 2``. A shuffled deck is an ``[N]`` row of card ids; cards are dealt from the
end of the row, so the ``t``-th card dealt is ``row[N - 1 - t]``.
"""

from __future__ import annotations

from typing import Any

import warp as wp

from torchrl_ext.envs._kernels.common import uniform64


@wp.func
def suit(card: int) -> int:
    """The suit of ``card``, in ``[0, 4)``."""
    return card % 4


@wp.func
def rank(card: int) -> int:
    """The rank of ``card``, in ``[0, 13)`` (0 is the ace, 12 the king)."""
    return (card // 4) % 13


@wp.func
def colour(card: int) -> int:
    """The colour of ``card``, in ``[0, 2)``."""
    return card % 2


@wp.func
def shuffle(deck: wp.array2d(dtype=Any), i: int, key: wp.uint32, first_draw: int):
    """Fill row ``i`` of ``deck`` with a uniformly random permutation of ``0 .. N-1``.

    A Fisher-Yates shuffle driven by the draws ``first_draw, first_draw + 1, ...`` of the stream
    ``key`` (``N - 1`` draws); give two decks of one episode disjoint draw ranges.
    """
    n = deck.shape[1]
    c = wp.int32(0)
    while c < n:
        deck[i, c] = deck.dtype(c)
        c += 1
    j = n - 1
    while j > 0:
        pick = wp.min(int(uniform64(key, first_draw + n - 1 - j) * wp.float64(j + 1)), j)
        swap = deck[i, j]
        deck[i, j] = deck[i, pick]
        deck[i, pick] = swap
        j -= 1
