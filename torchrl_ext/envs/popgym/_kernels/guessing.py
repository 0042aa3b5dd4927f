"""Warp functions of POPGym's card-guessing games: HigherLower and Concentration.

Both games shuffle a deck once per episode (:func:`~torchrl_ext.envs.popgym._kernels.deck.shuffle`
on the draws ``0 .. N-2`` of the episode's stream) and draw nothing afterwards.

**HigherLower.** The ``[N]`` row ``deck`` is the shuffled deck; after ``step`` steps the current
card is ``deck[N - 1 - step]`` (cards are dealt from the end) and the observation is its rank.
A step deals the next card; the guess (0: higher, 1: lower) earns ``+1/N`` if right, ``-1/N``
if wrong and 0 on a tie. The episode terminates on the step that deals the last card but one,
after ``N - 1`` steps.

**Concentration.** ``deck[c]`` is the card lying face down at position ``c``; its value is its
colour or its rank. ``face_up[c]`` marks matched positions, ``in_play`` is the position flipped
first in the current pair (``-1`` between pairs) and ``shown_first``/``shown_second`` the
positions flipped in the last step's pair (``-1`` if none). ``board[c]`` is what position ``c``
shows: the card's value if it is matched or in ``shown_first``/``shown_second``, else
``facedown``. Steps update it where cards turn (the new flips, and the last pair turning back
face down unless matched), so observing is a copy of the row.

Loops over a row are ``while`` loops: Warp's CPU code for ``range()`` with a bound known only at
run time is several times slower, which matters in functions run every step.
"""

from __future__ import annotations

from typing import Any

import warp as wp

from torchrl_ext.envs.popgym._kernels.deck import colour, rank, shuffle


# ---------------------------------------------------------------------------------- HigherLower
@wp.func
def current_card(s: Any, i: int, step: int) -> int:
    """The card on the table of env ``i`` after ``step`` steps (clamped to the deck)."""
    n = s.deck.shape[1]
    return int(s.deck[i, wp.max(n - 1 - step, 0)])


@wp.func
def higher_lower_start(s: Any, p: Any, i: int, key: wp.uint32):
    """A new episode: shuffle the deck."""
    shuffle(s.deck, i, key, 0)


@wp.func
def higher_lower_advance(s: Any, p: Any, a: Any, i: int, step: int, key: wp.uint32):
    """Deal the next card and score the guess ``a.action[i]`` (0: higher, 1: lower)."""
    n = s.deck.shape[1]
    now = rank(current_card(s, i, step))
    nxt = rank(current_card(s, i, step + 1))
    guess_higher = a.action[i] == wp.int64(0)
    reward = p.zero
    if nxt != now:
        reward = wp.where((nxt > now) == guess_higher, p.right, p.wrong)
    return reward, n - 1 - step <= 1


@wp.func
def higher_lower_observe(s: Any, p: Any, o: Any, i: int, step: int, key: wp.uint32):
    """The rank of the current card."""
    o.observation[i] = o.observation.dtype(rank(current_card(s, i, step)))


# -------------------------------------------------------------------------------- Concentration
@wp.func
def card_value(s: Any, p: Any, i: int, position: int) -> int:
    """The value matched at ``position``: the card's rank or colour."""
    card = int(s.deck[i, position])
    value = colour(card)
    if p.by_rank != 0:
        value = rank(card)
    return value


@wp.func
def concentration_start(s: Any, p: Any, i: int, key: wp.uint32):
    """A new episode: shuffle the deck, every card face down, no pair in play."""
    shuffle(s.deck, i, key, 0)
    down = s.board.dtype(p.facedown)
    c = wp.int32(0)
    while c < s.deck.shape[1]:
        s.face_up[i, c] = wp.int32(0)
        s.board[i, c] = down
        c += 1
    s.in_play[i] = wp.int32(-1)
    s.shown_first[i] = wp.int32(-1)
    s.shown_second[i] = wp.int32(-1)


@wp.func
def turn_back(s: Any, p: Any, i: int, position: int):
    """Turn the card at ``position`` (``-1``: none) face down again unless it is matched."""
    if position >= 0:
        if s.face_up[i, position] == 0:
            s.board[i, position] = s.board.dtype(p.facedown)


@wp.func
def all_face_up(s: Any, i: int) -> bool:
    """Whether every card of env ``i`` is matched."""
    down = wp.int32(0)
    c = wp.int32(0)
    while c < s.face_up.shape[1]:
        if s.face_up[i, c] == wp.int32(0):
            down += 1
        c += 1
    return down == 0


@wp.func
def concentration_advance(s: Any, p: Any, a: Any, i: int, step: int, key: wp.uint32):
    """Flip the card at position ``a.action[i]``; score a finished or invalid pair.

    Flipping a matched card costs ``fail`` per card in play and ends the pair; a second flip
    scores ``success`` for two distinct positions of equal value (both stay face up, and the
    episode terminates once all are) and ``2 * fail`` otherwise; a first flip scores 0.
    """
    x = int(a.action[i])
    turn_back(s, p, i, int(s.shown_first[i]))
    turn_back(s, p, i, int(s.shown_second[i]))
    first = int(s.in_play[i])
    pair = first >= 0
    if not pair:
        first = x
    s.shown_first[i] = wp.int32(first)
    s.shown_second[i] = wp.where(pair, wp.int32(x), wp.int32(-1))
    s.in_play[i] = wp.int32(-1)
    reward = p.zero
    terminated = False
    if s.face_up[i, x] != 0 or s.face_up[i, first] != 0:
        reward = wp.where(pair, p.fail + p.fail, p.fail)
    elif pair:
        if x != first and card_value(s, p, i, x) == card_value(s, p, i, first):
            reward = p.success
            s.face_up[i, x] = wp.int32(1)
            s.face_up[i, first] = wp.int32(1)
            terminated = all_face_up(s, i)
        else:
            reward = p.fail + p.fail
    else:
        s.in_play[i] = wp.int32(x)
    s.board[i, first] = s.board.dtype(card_value(s, p, i, first))
    if pair:
        s.board[i, x] = s.board.dtype(card_value(s, p, i, x))
    return reward, terminated


@wp.func
def concentration_observe(s: Any, p: Any, o: Any, i: int, step: int, key: wp.uint32):
    """What every position shows: the row ``board[i]``."""
    c = wp.int32(0)
    while c < s.board.shape[1]:
        o.observation[i, c] = s.board[i, c]
        c += 1
