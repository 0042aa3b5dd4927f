"""Warp functions of the signalling game, from which the env base builds its kernels.

One env's state is two ints: the ``target`` the speaker must convey and the ``token`` it sent
(``-1`` until it speaks); the base counts the episode's steps.
An episode has ``delay + 2`` steps: the speaker sees the target (one-hot) at step 0 only and its
action there is the token; the listener sees the token only in the observation that follows, at
step 1; its action at step ``delay + 1`` (flagged in its observation) is its answer, scored
against the target, and that step terminates the episode. :func:`draw_target` is the only
random draw: the target of episode ``k`` of env ``i`` is ``floor(V * u)`` for the first uniform
of the stream ``(seed, i, k)``.
"""

from __future__ import annotations

from typing import Any

import warp as wp

from torchrl_ext.envs._kernels.common import uniform64


@wp.func
def draw_target(key: wp.uint32, vocab: int) -> wp.int32:
    """The target of the episode whose stream is ``key``: uniform in ``[0, vocab)``."""
    u = uniform64(key, 0)
    return wp.min(wp.int32(u * wp.float64(vocab)), wp.int32(vocab - 1))


@wp.func
def start(s: Any, p: Any, i: int, key: wp.uint32):
    """A new episode: a new target, no token yet."""
    s.target[i] = draw_target(key, p.vocab)
    s.token[i] = wp.int32(-1)


@wp.func
def advance(s: Any, p: Any, a: Any, i: int, step: int, key: wp.uint32):
    """The speaker's token is kept at step 0; the listener's answer is scored at ``delay + 1``.

    Returns the team reward (1 for a right answer, else 0) and whether the episode ends.
    """
    if step == 0:
        s.token[i] = wp.int32(a.speaker_action[i])
    answer_step = step >= p.delay + 1  # ">=": a loaded over-long episode ends too
    right = answer_step and a.listener_action[i] == wp.int64(s.target[i])
    return wp.where(right, 1.0, 0.0), answer_step


@wp.func
def observe(s: Any, p: Any, o: Any, i: int, step: int, key: wp.uint32):
    """Write env ``i``'s observations at episode step ``step``.

    Each agent sees its input on its turn only: the speaker ``one_hot(target)`` (``V`` entries)
    at step 0, the listener ``one_hot(token)`` at step 1, zeros otherwise; the listener's last
    entry is 1 at its answer step, ``delay + 1``.
    """
    speaker, listener = o.speaker_observation, o.listener_observation
    zero, one = speaker.dtype(0.0), speaker.dtype(1.0)
    target, token = int(s.target[i]), int(s.token[i])
    v = wp.int32(0)
    while v < p.vocab:  # not range(): Warp's CPU code for a run-time bound is slower
        speaker[i, v] = wp.where(step == 0 and v == target, one, zero)
        listener[i, v] = wp.where(step == 1 and v == token, one, zero)
        v += 1
    listener[i, p.vocab] = wp.where(step == p.delay + 1, one, zero)
