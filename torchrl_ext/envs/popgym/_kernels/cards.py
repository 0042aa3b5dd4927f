"""Warp functions of POPGym's RepeatFirst, RepeatPrevious, Autoencode and CountRecall.

Each env holds its shuffled deck(s) as ``[N]`` rows of card ids and ``dealt``, the number of
cards dealt so far (1 right after :func:`start`, which deals the first card). Cards are dealt
from the end of a row (see :mod:`torchrl_ext.envs.popgym._kernels.deck`), so the card dealt last
is ``deck[N - dealt]`` and the ``j``-th card dealt (0-based) is ``deck[N - 1 - j]``. A new
episode's decks come from the episode's random stream; the steps draw nothing.

Every index is clamped, so that stepping an env past the end of its episode (without a reset)
stays in bounds; those steps repeat the last deal and report ``terminated`` again.
"""

from __future__ import annotations

from typing import Any

import warp as wp

from torchrl_ext.envs.popgym._kernels.deck import colour, rank, shuffle, suit

#: ``CountRecall``'s card values: colours, suits or ranks.
COLOURS, SUITS, RANKS = 0, 1, 2


@wp.func
def card_value(card: int, kind: int) -> int:
    """The value of ``card`` that ``kind`` (``COLOURS``, ``SUITS`` or ``RANKS``) counts."""
    if kind == 0:
        return colour(card)
    if kind == 1:
        return suit(card)
    return rank(card)


@wp.func
def last_dealt(deck: Any, i: int, dealt: int) -> int:
    """The card of row ``i`` dealt last when ``dealt`` cards are out (the first one if none)."""
    n = deck.shape[1]
    return int(deck[i, wp.clamp(n - dealt, 0, n - 1)])


@wp.func
def deal(s: Any, i: int) -> int:
    """Deal one card of env ``i`` (none once the deck is empty); returns the new ``dealt``."""
    dealt = wp.min(int(s.dealt[i]) + 1, s.deck.shape[1])
    s.dealt[i] = wp.int32(dealt)
    return dealt


@wp.func
def signed(right: bool, scale: Any):
    """``+scale`` for a right answer, ``-scale`` for a wrong one."""
    return wp.where(right, scale, -scale)


@wp.func
def begin(s: Any, i: int, key: wp.uint32):
    """Shuffle env ``i``'s deck from the episode's stream and deal its first card."""
    shuffle(s.deck, i, key, 0)
    s.dealt[i] = wp.int32(1)


# ---------------------------------------------------------------------- RepeatFirst
@wp.func
def repeat_first_advance(s: Any, p: Any, a: Any, i: int, step: int, key: wp.uint32):
    """Score the action against the first card's suit, then deal the next card.

    The episode ends on the step taken with one card left in the deck (``N - 1`` steps).
    """
    n = s.deck.shape[1]
    terminated = n - int(s.dealt[i]) <= 1
    first = suit(int(s.deck[i, n - 1]))
    reward = signed(a.action[i] == wp.int64(first), p.scale)
    deal(s, i)
    return reward, terminated


@wp.func
def suit_observe(s: Any, p: Any, o: Any, i: int, step: int, key: wp.uint32):
    """The suit of the card dealt last."""
    o.observation[i] = wp.int64(suit(last_dealt(s.deck, i, int(s.dealt[i]))))


# ---------------------------------------------------------------------- RepeatPrevious
@wp.func
def repeat_previous_advance(s: Any, p: Any, a: Any, i: int, step: int, key: wp.uint32):
    """Score the action against the suit shown ``k`` observations ago, then deal.

    With ``dealt`` cards out, the card shown ``k`` observations ago is the one dealt at index
    ``dealt - k``; steps with fewer than ``k`` cards out pay 0.
    """
    n = s.deck.shape[1]
    dealt = int(s.dealt[i])
    terminated = n - dealt <= 1
    reward = wp.float64(0.0)  # any float type: the base casts it to the reward dtype
    if dealt >= p.k:
        target = suit(int(s.deck[i, wp.clamp(n - 1 - dealt + p.k, 0, n - 1)]))
        reward = wp.float64(signed(a.action[i] == wp.int64(target), p.scale))
    deal(s, i)
    return reward, terminated


# ---------------------------------------------------------------------- Autoencode
@wp.func
def autoencode_start(s: Any, p: Any, i: int, key: wp.uint32):
    """A new episode: a shuffled deck, its first card shown, nothing recited."""
    begin(s, i, key)
    s.recited[i] = wp.int32(0)


@wp.func
def autoencode_advance(s: Any, p: Any, a: Any, i: int, step: int, key: wp.uint32):
    """Watch: show the next card (the action is ignored). Play: recite the shown cards backwards.

    The play phase starts once all ``N`` cards are shown; its ``j``-th step scores the action
    against the suit of ``deck[j]`` (the ``j``-th card from the last shown) and the step that
    recites the first shown card ends the episode.
    """
    n = s.deck.shape[1]
    reward = wp.float64(0.0)  # any float type: the base casts it to the reward dtype
    terminated = False
    if int(s.dealt[i]) < n:
        deal(s, i)
    else:
        recited = int(s.recited[i])
        terminated = n - recited <= 1
        target = suit(int(s.deck[i, wp.min(recited, n - 1)]))
        reward = wp.float64(signed(a.action[i] == wp.int64(target), p.scale))
        s.recited[i] = wp.int32(wp.min(recited + 1, n))
    return reward, terminated


@wp.func
def autoencode_observe(s: Any, p: Any, o: Any, i: int, step: int, key: wp.uint32):
    """Write ``(mode, suit)``; mode 1 is WATCH, 0 is PLAY.

    ``(1, suit)`` while watching, ``(0, suit)`` on the last card shown, ``(0, 0)`` while reciting.
    """
    n = s.deck.shape[1]
    dealt = int(s.dealt[i])
    mode = wp.where(dealt < n, 1, 0)
    shown = suit(last_dealt(s.deck, i, dealt))
    if int(s.recited[i]) > 0:
        shown = 0
    o.observation[i, 0] = wp.int64(mode)
    o.observation[i, 1] = wp.int64(shown)


# ---------------------------------------------------------------------- CountRecall
@wp.func
def count_recall_start(s: Any, p: Any, i: int, key: wp.uint32):
    """Shuffle the value and query decks (disjoint draws), deal one of each and count the value."""
    n = s.deck.shape[1]
    begin(s, i, key)
    shuffle(s.query_deck, i, key, n - 1)
    v = wp.int32(0)
    while v < s.counts.shape[1]:
        s.counts[i, v] = wp.int32(0)
        v += 1
    first = card_value(int(s.deck[i, n - 1]), p.kind)
    s.counts[i, first] = wp.int32(1)


@wp.func
def count_recall_advance(s: Any, p: Any, a: Any, i: int, step: int, key: wp.uint32):
    """Score the action against how many dealt values equal the query shown last, then deal.

    The new value card is counted after scoring; the step dealing the last card ends the episode.
    """
    dealt = int(s.dealt[i])
    query = card_value(last_dealt(s.query_deck, i, dealt), p.kind)
    reward = signed(a.action[i] == wp.int64(s.counts[i, query]), p.scale)
    if dealt < s.deck.shape[1]:
        dealt = deal(s, i)
        value = card_value(last_dealt(s.deck, i, dealt), p.kind)
        s.counts[i, value] = s.counts[i, value] + wp.int32(1)
    return reward, dealt >= s.deck.shape[1]


@wp.func
def count_recall_observe(s: Any, p: Any, o: Any, i: int, step: int, key: wp.uint32):
    """``(value, query)`` of the cards dealt last from the two decks."""
    dealt = int(s.dealt[i])
    o.observation[i, 0] = wp.int64(card_value(last_dealt(s.deck, i, dealt), p.kind))
    o.observation[i, 1] = wp.int64(card_value(last_dealt(s.query_deck, i, dealt), p.kind))


@wp.func
def repeat_start(s: Any, p: Any, i: int, key: wp.uint32):
    """A new episode of RepeatFirst or RepeatPrevious: a shuffled deck, its first card dealt."""
    begin(s, i, key)
