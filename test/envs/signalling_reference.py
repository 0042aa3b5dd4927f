"""A slow, obvious Python signalling game: the oracle of ``test_signalling.py``.

It shares no code with the Warp env: the counter-based hash (MurmurHash3's finalizer chained over
the seed words, the env index and the episode index) is written again here with Python ints.
"""

from __future__ import annotations

import dataclasses

_MASK = 0xFFFFFFFF
_GOLDEN = 0x9E3779B9


def fmix32(h: int) -> int:
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK
    h ^= h >> 16
    return h


def stream_key(seed: int, env: int, episode: int) -> int:
    h = fmix32((seed & _MASK) ^ _GOLDEN)
    h = fmix32(h ^ (seed >> 32))
    h = fmix32(h ^ env)
    return fmix32(h ^ episode)


def first_uniform(key: int) -> float:
    a = fmix32(key ^ fmix32((0 + _GOLDEN) & _MASK))
    b = fmix32(key ^ fmix32((1 + _GOLDEN) & _MASK))
    return ((a >> 5) * 67108864.0 + (b >> 6)) * 1.1102230246251565e-16


def target_of(seed: int, env: int, episode: int, vocab: int) -> int:
    return min(int(first_uniform(stream_key(seed, env, episode)) * vocab), vocab - 1)


@dataclasses.dataclass
class Game:
    """One env of the game: the target, the token sent (-1 before), the step, episodes begun."""

    seed: int
    env: int
    vocab: int
    delay: int
    target: int = 0
    token: int = -1
    step: int = 0
    episodes: int = 0

    def begin(self) -> None:
        self.target = target_of(self.seed, self.env, self.episodes, self.vocab)
        self.episodes += 1
        self.token, self.step = -1, 0

    def observe(self) -> tuple[list[float], list[float]]:
        speaker = [1.0 if self.step == 0 and v == self.target else 0.0 for v in range(self.vocab)]
        listener = [1.0 if self.step == 1 and v == self.token else 0.0 for v in range(self.vocab)]
        listener.append(1.0 if self.step == self.delay + 1 else 0.0)
        return speaker, listener

    def play(self, token: int, answer: int) -> dict:
        """One step; returns the next observations, the reward and the done flag."""
        answering = self.step == self.delay + 1
        if self.step == 0:
            self.token = token
        reward = 1.0 if answering and answer == self.target else 0.0
        self.step += 1
        speaker, listener = self.observe()
        return {"speaker": speaker, "listener": listener, "reward": reward, "done": answering}
