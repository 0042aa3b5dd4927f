"""Warp kernels of the signalling game: masked reset and one step with optional auto-reset.

One env's state is three ints, held in a :class:`Game`: the ``target`` the speaker must convey,
the ``token`` it sent (``-1`` until it speaks) and the step counter of its ``Episodes``.
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

from torchrl_ext.envs._kernels.common import (
    Episodes,
    Flags,
    count_step,
    next_episode_key,
    set_flags,
    uniform64,
)


@wp.struct
class Game:
    """Every env's game, passed to kernels as one argument.

    ``target`` and ``token`` per env, the episode bookkeeping and the answer ``delay``.
    """

    target: wp.array(dtype=wp.int32)
    token: wp.array(dtype=wp.int32)
    episodes: Episodes
    delay: int


@wp.func
def draw_target(episodes: Episodes, i: int, vocab: int) -> wp.int32:
    """Begin env ``i``'s next episode; return its target, uniform in ``[0, vocab)``."""
    u = uniform64(next_episode_key(episodes, i), 0)
    return wp.min(wp.int32(u * wp.float64(vocab)), wp.int32(vocab - 1))


@wp.func
def observe(
    speaker_obs: wp.array2d(dtype=Any),
    listener_obs: wp.array2d(dtype=Any),
    i: int,
    game: Game,
    target: wp.int32,
    token: wp.int32,
):
    """Write env ``i``'s observations at its current episode step.

    Each agent sees its input on its turn only: the speaker ``one_hot(target)`` (``V`` entries)
    at step 0, the listener ``one_hot(token)`` at step 1, zeros otherwise; the listener's last
    entry is 1 at its answer step, ``delay + 1``.
    """
    step = int(game.episodes.steps[i])
    vocab = speaker_obs.shape[1]
    zero = speaker_obs.dtype(0.0)
    one = speaker_obs.dtype(1.0)
    for v in range(vocab):
        speaker_obs[i, v] = wp.where(step == 0 and v == int(target), one, zero)
        listener_obs[i, v] = wp.where(step == 1 and v == int(token), one, zero)
    listener_obs[i, vocab] = wp.where(step == game.delay + 1, one, zero)


@wp.kernel
def signalling_reset(
    game: Game,
    mask: wp.array(dtype=wp.int32),
    speaker_root: wp.array2d(dtype=Any),
    listener_root: wp.array2d(dtype=Any),
):
    """Start a new episode in the envs whose ``mask`` entry is nonzero; observe every env."""
    i = wp.tid()
    if mask[i] != 0:
        game.target[i] = draw_target(game.episodes, i, speaker_root.shape[1])
        game.token[i] = wp.int32(-1)
    observe(speaker_root, listener_root, i, game, game.target[i], game.token[i])


@wp.kernel
def signalling_step(
    game: Game,
    action: wp.array2d(dtype=wp.int64),
    autoreset: int,
    speaker_next: wp.array2d(dtype=Any),
    listener_next: wp.array2d(dtype=Any),
    speaker_root: wp.array2d(dtype=Any),
    listener_root: wp.array2d(dtype=Any),
    reward: wp.array2d(dtype=Any),
    flags: Flags,
):
    """One step of env ``i``: ``action[i] = (speaker token, listener answer)``.

    Writes the next observations, the team reward (1 for a right answer at the answer step, else
    0) and the flags into slot 0 of ``[N, 1]`` outputs; with ``autoreset`` a finished env starts
    its next episode and every env's current observations go to the root buffers.
    """
    i = wp.tid()
    step = game.episodes.steps[i]
    tgt = game.target[i]
    tok = game.token[i]
    if step == 0:
        tok = wp.int32(action[i, 0])
    answer_step = int(step) == game.delay + 1
    right = answer_step and action[i, 1] == wp.int64(tgt)
    count_step(game.episodes.steps, i, 2147483647)  # the answer step ends the episode, not a limit
    observe(speaker_next, listener_next, i, game, tgt, tok)
    reward[i, 0] = wp.where(right, reward.dtype(1.0), reward.dtype(0.0))
    set_flags(flags, i, 0, answer_step, False)
    if autoreset != 0:
        if answer_step:
            tgt = draw_target(game.episodes, i, speaker_next.shape[1])
            tok = wp.int32(-1)
        observe(speaker_root, listener_root, i, game, tgt, tok)
    game.target[i] = tgt
    game.token[i] = tok
