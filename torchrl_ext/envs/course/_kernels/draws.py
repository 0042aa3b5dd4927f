"""Counter-based randomness of the course kernels: a course's draws, hashed from its seed.

The uniform number ``j`` of a course is a 64-bit hash of the course's effective seed and ``j``
(:func:`uniform`), so a course depends only on ``(seed, epoch)`` and its parameters, never on the
env index, the batch size or the launch order. :func:`~torchrl_ext.envs.course.effective_seed` is
the same hash on the host.
"""

from __future__ import annotations

import warp as wp

from torchrl_ext.envs.course._kernels.courses import Courses
from torchrl_ext.envs.course.config import MAX_HARMONICS

NUM_DRAWS = 2 * MAX_HARMONICS
"""Uniform draws per course: an amplitude and a phase per harmonic."""

_MIX_1 = wp.constant(wp.uint64(0xBF58476D1CE4E5B9))
_MIX_2 = wp.constant(wp.uint64(0x94D049BB133111EB))
_GOLDEN = wp.constant(wp.uint64(0x9E3779B97F4A7C15))
_INV_2_POW_24 = wp.constant(5.9604644775390625e-08)


@wp.func
def mix64(z: wp.uint64) -> wp.uint64:
    """SplitMix64 finalizer: a bijective 64-bit mix."""
    a = (z ^ (z >> wp.uint64(30))) * _MIX_1
    b = (a ^ (a >> wp.uint64(27))) * _MIX_2
    return b ^ (b >> wp.uint64(31))


@wp.func
def effective_seed(seed: wp.int64, epoch: wp.int64) -> wp.uint64:
    """The seed itself at epoch 0, a hash of ``(seed, epoch)`` afterwards (bits as uint64)."""
    s = wp.uint64(seed)
    if epoch == wp.int64(0):
        return s
    return mix64(mix64(s) ^ (wp.uint64(epoch) * _GOLDEN))


@wp.func
def uniform(key: wp.uint64, j: wp.int32) -> wp.float32:
    """Uniform number ``j`` in ``[0, 1)`` of the stream ``key``, on a 2**-24 grid."""
    h = mix64(mix64(key) + wp.uint64(j + 1) * _GOLDEN)
    return wp.float32(h >> wp.uint64(40)) * _INV_2_POW_24


@wp.func
def draw_coefficients(c: Courses, env: int):
    """Draw the uniform numbers ``coefficients[env, j]`` of env ``env``'s course."""
    key = effective_seed(c.seed[env], c.epoch[env])
    for j in range(c.coefficients.shape[1]):
        c.coefficients[env, j] = uniform(key, j)
