"""The examples' shared bookkeeping: the return window and its target, seeding."""

from __future__ import annotations

import math

import torch

from torchrl_ext.examples import _common


def _first_hit(values_per_batch, size, target):
    """Plain reference: the mean of the last ``size`` values after each batch, first crossing."""
    seen, means, hit = [], [], None
    for batch, values in enumerate(values_per_batch, start=1):
        seen += values
        last = seen[-size:]
        mean = sum(last) / len(last) if last else math.nan
        means.append(mean)
        if hit is None and len(last) == size and mean >= target:
            hit = batch
    return means, hit


class TestReturnWindow:
    """The mean of the last ``size`` values; the target counts once the window is full; a window
    rebuilt from saved values and hit continues as the uninterrupted one."""

    def test_not_full_never_hits(self):
        window = _common.ReturnWindow(3, target=1.0)
        assert window.update([5.0, 5.0], frames=8, seconds=0.5) == 5.0
        assert window.hit is None and window.reached()["frames_to_target"] is None

    def test_empty_mean_is_nan(self):
        assert math.isnan(_common.ReturnWindow(2, target=0.0).update([], 4, 0.1))

    def test_matches_plain_loop(self):
        gen = torch.Generator().manual_seed(0)
        batches = [
            torch.rand(int(torch.randint(0, 4, (1,), generator=gen)), generator=gen).tolist()
            for _ in range(60)
        ]
        means, hit = _first_hit(batches, size=5, target=0.6)
        assert hit is not None  # the case exercises a crossing
        window = _common.ReturnWindow(5, target=0.6)
        got = [window.update(v, frames=64 * i, seconds=float(i)) for i, v in enumerate(batches, 1)]
        assert [repr(m) for m in got] == [repr(m) for m in means]
        assert window.hit == (64 * hit, float(hit))

    def test_resumed_window_continues(self):
        full = _common.ReturnWindow(2, target=3.0)
        for i, values in enumerate([[1.0], [4.0], [2.0], [5.0]], 1):
            full.update(values, i, float(i))
        first = _common.ReturnWindow(2, target=3.0)
        for i, values in enumerate([[1.0], [4.0]], 1):
            first.update(values, i, float(i))
        resumed = _common.ReturnWindow(2, 3.0, list(first.recent), first.hit)
        for i, values in enumerate([[2.0], [5.0]], 3):
            resumed.update(values, i, float(i))
        assert (
            (list(resumed.recent), resumed.hit)
            == (list(full.recent), full.hit)
            == ([2.0, 5.0], (3, 3.0))
        )


class TestSeeded:
    """``seeded`` draws the same numbers for the same seed and leaves the global generator."""

    def test_seeded_leaves_the_global_generator(self):
        before = torch.get_rng_state()
        draws = [_common.seeded(5, torch.randint, 0, 1000, (4,)) for _ in range(2)]
        assert torch.equal(draws[0], draws[1])
        assert torch.equal(torch.get_rng_state(), before)
